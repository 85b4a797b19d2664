"""From a decoded request body to an Admitted job, every check done before it is queued: the
parameters specmon cannot honour, the chat template, the class, the sampling settings, and
whether prompt plus reply fit the context (the KV cache, less one round's draft)."""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from typing import Callable

from specmon.engine.prompts import Prompt
from specmon.events.schema import Sampling
from specmon.server.chat import completion_prompt, last_user_text, messages_for_template, render_chat
from specmon.server.errors import ApiError, check_unsupported
from specmon.server.jobs import Admitted
from specmon.server.protocol import MAX_STOPS, ChatCompletionRequest, CompletionRequest


@dataclass
class Admission:
    """What checking a request needs to know of the session."""

    model_id: str
    tokenizer: object  # ChatTokenizer: encode, decode, chat_template, eos_id, vocab_size
    max_len: int  # KV cache positions
    max_draft_len: int  # the longest k a round may draft (the policy may pick any up to its maximum)
    defaults: Sampling  # the profile's, for settings a request leaves out
    classify: Callable[[str, str | None], tuple[str, str]]  # (text, named class) -> (class, rule)

    @property
    def context_len(self) -> int:
        """Prompt + reply tokens that fit: the cache less one round's draft and its verify position."""
        return self.max_len - self.max_draft_len - 1

    def chat(self, request: ChatCompletionRequest, named_class: str | None) -> Admitted:
        check_unsupported(request)
        messages = messages_for_template(request.messages)
        tok = self.tokenizer
        text = render_chat(tok.chat_template, messages, eos_token=tok.tokenizer.id_to_token(tok.eos_id) or "")
        return self._admit("chat", last_user_text(messages), tok.encode(text), request, named_class)

    def completion(self, request: CompletionRequest, named_class: str | None) -> Admitted:
        check_unsupported(request)
        text, ids = completion_prompt(request, self.tokenizer.encode)
        self._check_ids(ids, "prompt")
        text = text or self.tokenizer.decode(ids)
        return self._admit("completion", text, ids, request, named_class, default_max=16)

    def _check_ids(self, ids: list[int], param: str) -> None:
        bad = next((t for t in ids if not 0 <= t < self.tokenizer.vocab_size), None)
        if bad is not None:
            raise ApiError(
                400,
                f"token id {bad} is outside the vocabulary (0..{self.tokenizer.vocab_size - 1})",
                param=param,
                code="invalid_value",
            )

    def _admit(self, endpoint: str, text: str, ids: list[int], request, named_class, default_max=None) -> Admitted:
        stops = _stops(request.stop)
        room = self.context_len - len(ids)
        # OpenAI's newer name wins; none asked, as OpenAI: up to the end of the context
        max_tokens = request.max_completion_tokens or request.max_tokens or default_max or max(room, 1)
        if max_tokens > room:
            raise ApiError(
                400,
                f"This model's maximum context length is {self.context_len} tokens. However, you "
                f"requested {len(ids) + max_tokens} tokens ({len(ids)} in the prompt, {max_tokens} for the "
                "completion). Please reduce the prompt or the completion length.",
                param="messages" if endpoint == "chat" else "prompt",
                code="context_length_exceeded",
            )
        if request.min_tokens > max_tokens:
            raise ApiError(
                400,
                f"min_tokens ({request.min_tokens}) is more than the reply may hold ({max_tokens})",
                param="min_tokens",
                code="invalid_value",
            )
        named = request.specmon_class or named_class or None  # "": none named
        name, rule = self.classify(text, named)
        request_id = ("chatcmpl-" if endpoint == "chat" else "cmpl-") + uuid.uuid4().hex[:24]
        extra = list(request.stop_token_ids or [])  # the reply ends at these and the model's eos (unless ignore_eos)
        self._check_ids(extra, "stop_token_ids")
        eos = () if request.ignore_eos else (self.tokenizer.eos_id,)
        prompt = Prompt(
            id=request_id,
            text=text,
            prompt_class="default",
            token_ids=tuple(ids),  # named: not a tag
            end_ids=tuple(dict.fromkeys([*eos, *extra])),
            min_tokens=request.min_tokens,
        )
        return Admitted(request_id, endpoint, prompt, name, rule, self._sampling(request), max_tokens, stops, named)

    def _sampling(self, request) -> Sampling:
        d = self.defaults
        top_p = d.top_p if request.top_p is None else request.top_p
        temperature = d.temperature if request.temperature is None else request.temperature
        if top_p == 0.0:  # a nucleus of mass 0 keeps the top token alone: greedy, and logged as greedy
            temperature, top_p = 0.0, 1.0
        return Sampling(
            temperature=temperature,
            top_p=top_p,
            top_k=max(d.top_k if request.top_k is None else request.top_k, 0),  # vLLM's -1 is our 0: no cut
            seed=secrets.randbelow(2**31) if request.seed is None else request.seed,  # logged: reproducible
        )


def _stops(stop: str | list[str] | None) -> list[str]:
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if len(stops) > MAX_STOPS:
        raise ApiError(
            400, f"`stop` holds {len(stops)} strings; at most {MAX_STOPS}", param="stop", code="invalid_value"
        )
    return [s for s in stops if s]
