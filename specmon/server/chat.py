"""Chat messages to prompt tokens with the model's own chat template (read from the GGUF's
`tokenizer.chat_template` or tokenizer_config.json), rendered the way Hugging Face renders it:
a sandboxed Jinja environment, trim_blocks and lstrip_blocks, `raise_exception` for templates that
check their input, and the generation prompt added for the assistant's reply."""

from __future__ import annotations

import functools

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from specmon.server.errors import ApiError
from specmon.server.protocol import ChatMessage, CompletionRequest

ROLES = {"system", "user", "assistant", "developer"}  # developer is OpenAI's newer name for system


def messages_for_template(messages: list[ChatMessage]) -> list[dict[str, str]]:
    """[{"role", "content"}] with text parts joined; tools, images and unknown roles refused by name."""
    if not messages:
        raise ApiError(400, "`messages` must hold at least one message", param="messages", code="invalid_value")
    out = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if message.role not in ROLES:
            raise ApiError(
                400,
                f"{where}.role {message.role!r} is not supported (use system, user or assistant)",
                param=f"{where}.role",
                code="unsupported_value",
            )
        if message.tool_calls is not None:
            raise ApiError(
                400,
                f"{where}.tool_calls: tools are not supported by specmon serve",
                param=f"{where}.tool_calls",
                code="unsupported_parameter",
            )
        role = "system" if message.role == "developer" else message.role
        out.append({"role": role, "content": _text(message, where)})
    return out


def _text(message: ChatMessage, where: str) -> str:
    content = message.content
    if content is None:
        raise ApiError(400, f"{where}.content is missing", param=f"{where}.content", code="missing_required_parameter")
    if isinstance(content, str):
        return content
    for j, part in enumerate(content):
        if part.type != "text" or part.text is None:
            raise ApiError(
                400,
                f"{where}.content[{j}]: only text parts are supported, not {part.type!r}",
                param=f"{where}.content[{j}].type",
                code="unsupported_value",
            )
    return "".join(part.text for part in content)


def last_user_text(messages: list[dict[str, str]]) -> str:
    """What the policy classifies: the last user message (the whole conversation is decoded)."""
    return next((m["content"] for m in reversed(messages) if m["role"] == "user"), messages[-1]["content"])


@functools.lru_cache(maxsize=4)
def _compiled(template: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = _raise
    return env.from_string(template)


def _raise(message: str):
    raise jinja2.TemplateError(message)


def render_chat(template: str, messages: list[dict[str, str]], eos_token: str) -> str:
    """The conversation as the model was trained to see it, ending where the assistant's reply starts."""
    try:
        return _compiled(template).render(
            messages=messages, add_generation_prompt=True, eos_token=eos_token, bos_token=""
        )
    except jinja2.TemplateError as exc:  # the template refused the conversation, e.g. roles that do not alternate
        raise ApiError(
            400, f"the model's chat template refused these messages: {exc}", param="messages", code="invalid_value"
        ) from None


def completion_prompt(request: CompletionRequest, encode) -> tuple[str, list[int]]:
    """(text to classify, token ids) of /v1/completions' prompt: a string, one string in a list, or token ids."""
    prompt = request.prompt
    if isinstance(prompt, list) and any(isinstance(p, str) for p in prompt) and any(isinstance(p, int) for p in prompt):
        raise ApiError(
            400,
            "`prompt` must be a string, a list of strings or a list of token ids, not a mix",
            param="prompt",
            code="invalid_type",
        )
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        if len(prompt) > 1:
            raise ApiError(
                400,
                f"`prompt` holds {len(prompt)} prompts; specmon serve takes one per request",
                param="prompt",
                code="unsupported_value",
            )
        prompt = prompt[0]
    ids, text = (encode(prompt), prompt) if isinstance(prompt, str) else (list(prompt), "")
    if not ids:
        raise ApiError(400, "`prompt` is empty", param="prompt", code="invalid_value")
    return text, ids
