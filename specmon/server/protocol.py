"""Request and response bodies of the OpenAI API as msgspec Structs, field by field (the shape
vLLM's protocol.py and TabbyAPI mirror), plus specmon's own `specmon` field and `specmon_class`.

Requests are decoded and validated in one step (msgspec.json.decode(body, type=...)); a field of
the wrong type or out of range is named in the error. Every top-level field is one of three kinds:
honoured, refused by name unless at its "not used" value (UNSUPPORTED), or harmless metadata
accepted on purpose (user, metadata, ...); a field the API does not define is refused by name, never ignored."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from specmon.backends.profiles import MAX_INT, MAX_SEED

Count = Annotated[int, msgspec.Meta(ge=1, le=MAX_INT)]
Temperature = Annotated[float, msgspec.Meta(ge=0.0, le=2.0)]
TopP = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]  # 0, as OpenAI allows: the top token alone
TopK = Annotated[int, msgspec.Meta(ge=-1, le=MAX_INT)]  # -1, as vLLM sends: no cut, like 0
Seed = Annotated[int, msgspec.Meta(ge=0, le=MAX_SEED)]
MAX_STOPS = 4  # as OpenAI allows
NonNegative = Annotated[int, msgspec.Meta(ge=0, le=MAX_INT)]  # min_tokens, a token id
Metadata = Annotated[dict[str, Annotated[str, msgspec.Meta(max_length=512)]], msgspec.Meta(max_length=16)]

# Parameters a request may carry only at the value that means "not used" (None: absent or null), by the
# requests that have them; each is a field of those requests (below), of any type unless typed there.
_SHARED: dict[str, tuple[Any, ...]] = {
    "n": (None, 1),
    "logprobs": (None, False),
    "top_logprobs": (None, 0),
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "logit_bias": (None, {}),
    "min_p": (None, 0, 0.0),
    "repetition_penalty": (None, 1, 1.0),
}
_CHAT_ONLY: dict[str, tuple[Any, ...]] = {
    "tools": (None, []),
    "tool_choice": (None, "none"),
    "functions": (None, []),
    "function_call": (None, "none"),
    "response_format": (None, {"type": "text"}),
    "audio": (None,),
    "prediction": (None,),
    "modalities": (None, ["text"]),
    "parallel_tool_calls": (None, False, True),
    "reasoning_effort": (None,),
    "verbosity": (None,),
    "web_search_options": (None,),
}
_COMPLETION_ONLY: dict[str, tuple[Any, ...]] = {"best_of": (None, 1), "echo": (None, False), "suffix": (None, "")}
UNSUPPORTED = {**_SHARED, **_CHAT_ONLY, **_COMPLETION_ONLY}
# Why a parameter is refused, where "not supported" alone would not say.
UNSUPPORTED_WHY: dict[str, str] = {
    "min_p": "the round loop's sampling transforms p and q by temperature, top_p and top_k only",
    "repetition_penalty": "a verify pass would need each position penalised by the draft tokens before it, "
    "which the round loop's sampling does not do",
    "reasoning_effort": "the served model is not a reasoning model",
}


class StreamOptions(msgspec.Struct, forbid_unknown_fields=True):
    include_usage: bool = False
    continuous_usage_stats: bool = False  # vLLM's: refused when true (usage comes once), never ignored


class ContentPart(msgspec.Struct):
    """One part of a message's content; only {"type": "text", "text": ...} can be decoded here."""

    type: str
    text: str | None = None


class ChatMessage(msgspec.Struct):
    role: str
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: Any = None
    tool_call_id: str | None = None


class _Sampled(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What chat and text completions share: sampling, limits, streaming, specmon's class."""

    model: str = ""
    max_tokens: Count | None = None
    max_completion_tokens: Count | None = None  # OpenAI's newer name; wins over max_tokens
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None  # not OpenAI's; vLLM and TabbyAPI accept it too
    seed: Seed | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False  # vLLM's: decode past the end-of-sequence token
    min_tokens: NonNegative = 0  # vLLM's: the end tokens cannot be chosen before this many tokens
    stop_token_ids: list[NonNegative] | None = None  # vLLM's: these tokens end the reply too
    specmon_class: str | None = None  # names the class (a policy tag or class name); clients send it in extra_body
    user: str | None = None  # it and the five below: accepted on purpose and not used (they change nothing sent back)
    metadata: Metadata | None = None
    store: bool | None = None
    service_tier: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    n: int | None = None  # refused unless 1 (UNSUPPORTED)


def _refusing(*unsupported: dict[str, tuple[Any, ...]]) -> type:
    """_Sampled with a field of any type for each parameter of `unsupported` it lacks: check_unsupported reads it."""
    names = [name for table in unsupported for name in table if name not in _Sampled.__struct_fields__]
    return msgspec.defstruct("_Refusing", [(name, Any, None) for name in names], bases=(_Sampled,), kw_only=True)


class ChatCompletionRequest(_refusing(_SHARED, _CHAT_ONLY), kw_only=True):
    messages: list[ChatMessage]


class CompletionRequest(_refusing(_SHARED, _COMPLETION_ONLY), kw_only=True):
    prompt: str | list[str | int]  # a string, one string in a list, or token ids


# -- responses ------------------------------------------------------------------------------


class Usage(msgspec.Struct):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class SpecmonInfo(msgspec.Struct):
    """Where a request's evidence is: its prompt id and round ids in the session's log."""

    session_id: str
    prompt_id: str
    prompt_class: str
    class_rule: str
    draft_len: int  # k at the start (0: plain decoding); a policy may change it round by round
    round_ids: list[int]
    draft_lens: list[int]  # the k of each round, beside round_ids
    stop_reason: str  # as PromptFinished says: eos, max_new_tokens, stop, cancelled


class SpecmonRound(msgspec.Struct):
    """The round a streamed chunk's text came from."""

    round_id: int
    draft_len: int
    proposed: int
    accepted: int


class AssistantMessage(msgspec.Struct):
    content: str
    role: str = "assistant"


class ChatChoice(msgspec.Struct):
    index: int
    message: AssistantMessage
    finish_reason: str
    logprobs: None = None


class _Reply(msgspec.Struct):
    id: str
    created: int  # when the completion began
    model: str


class ChatCompletion(_Reply):
    choices: list[ChatChoice]
    usage: Usage
    specmon: SpecmonInfo
    object: str = "chat.completion"


class Delta(msgspec.Struct, omit_defaults=True):
    role: str | None = None
    content: str | None = None


class ChunkChoice(msgspec.Struct):
    index: int
    delta: Delta
    finish_reason: str | None = None
    logprobs: None = None


class ChatCompletionChunk(_Reply):
    choices: list[ChunkChoice]
    object: str = "chat.completion.chunk"
    usage: Usage | None = None
    specmon: SpecmonInfo | SpecmonRound | None = None


class CompletionChoice(msgspec.Struct):
    index: int
    text: str
    finish_reason: str | None
    logprobs: None = None


class Completion(_Reply):
    choices: list[CompletionChoice]
    object: str = "text_completion"
    usage: Usage | None = None
    specmon: SpecmonInfo | SpecmonRound | None = None


class Model(msgspec.Struct):
    id: str
    created: int
    owned_by: str = "specmon"
    object: str = "model"
    max_model_len: int | None = None


class ModelList(msgspec.Struct):
    data: list[Model]
    object: str = "list"


class ErrorBody(msgspec.Struct):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(msgspec.Struct):
    error: ErrorBody


class Health(msgspec.Struct):
    status: Literal["ok"]
    session_id: str
    model: str
    queue_depth: int
    in_flight: int


encoder = msgspec.json.Encoder()
