"""A proxied request's class, as `specmon serve` finds it: the class the request names (the body's
`specmon_class`, else the X-Specmon-Class header), else the policy's first class whose match takes the
last user message (chat) or the prompt (completion). The body is read only to classify: it is
forwarded as it came, so a body the proxy cannot read is still the upstream's to answer."""

from __future__ import annotations

from typing import Any

import msgspec

from specmon.policy.classify import UnknownClass, classify, named_class
from specmon.policy.schema import Policy
from specmon.server.chat import last_user_text
from specmon.server.classes import unknown_class


def body_fields(body: bytes) -> dict[str, Any]:
    """The JSON object, or {} for anything else (the upstream says what is wrong with it)."""
    try:
        parsed = msgspec.json.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def chat_text(body: dict[str, Any]) -> str:
    """The last user message's text (its text parts joined); "" where there is none."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ""
    plain = [{"role": m.get("role"), "content": _content(m.get("content"))} for m in messages if isinstance(m, dict)]
    return last_user_text(plain) if plain else ""


def completion_text(body: dict[str, Any]) -> str:
    """The prompt as text: a string, or the first string of a list; "" for token ids."""
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        prompt = next((p for p in prompt if isinstance(p, str)), "")
    return prompt if isinstance(prompt, str) else ""


def request_class(policy: Policy, endpoint: str, body: dict[str, Any], header: str | None) -> tuple[str, str]:
    """(class, the rule that said so); a class the policy lacks is a 400, as `specmon serve` refuses it."""
    named = body.get("specmon_class")
    named = named if isinstance(named, str) and named else header or None
    text = chat_text(body) if endpoint == "chat" else completion_text(body)
    try:
        return named_class(policy, named) if named is not None else classify(policy, text)
    except UnknownClass as exc:
        raise unknown_class(exc) from None


def _content(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI's parts: text is classified, images and audio are not text
        return "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""
