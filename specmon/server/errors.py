"""One error shape for every refusal: OpenAI's {"error": {"message", "type", "param", "code"}},
with the HTTP status that goes with it."""

from __future__ import annotations

import re
from dataclasses import KW_ONLY, dataclass, field

import msgspec

from specmon.server.protocol import UNSUPPORTED, UNSUPPORTED_WHY, ErrorBody, ErrorResponse, encoder

_PATH = re.compile(r" - at `\$\.?([^`]*)`$")
_FIELD = re.compile(r"Object (missing required|contains unknown) field `([^`]+)`")


@dataclass(eq=False)
class ApiError(Exception):
    """A request refused with an OpenAI-style body; `headers` go with it (e.g. Retry-After)."""

    status: int
    message: str
    _: KW_ONLY
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def body(self) -> bytes:
        return encoder.encode(ErrorResponse(ErrorBody(self.message, self.type, self.param, self.code)))


def from_decode_error(exc: msgspec.DecodeError) -> ApiError:
    """msgspec's message names the field and what was wrong with it; the field becomes `param`."""
    text = str(exc)
    if not isinstance(exc, msgspec.ValidationError):
        return ApiError(400, f"the request body is not valid JSON ({text})", code="invalid_json")
    path = _PATH.search(text)
    where = path.group(1) if path else ""
    if named := _FIELD.search(text):
        field = f"{where}.{named.group(2)}" if where else named.group(2)
        if named.group(1) == "missing required":
            return ApiError(400, f"missing required field `{field}`", param=field, code="missing_required_parameter")
        return ApiError(
            400,
            f"`{field}` is not a parameter specmon serve knows, so it cannot honour it; leave it out",
            param=field,
            code="unsupported_parameter",
        )
    message = _PATH.sub("", text)
    if not where:
        return ApiError(400, f"the request body must be a JSON object ({message})", code="invalid_type")
    code = "invalid_type" if ", got `" in message else "invalid_value"
    return ApiError(400, f"invalid value for `{where}`: {message}", param=where, code=code)


def check_unsupported(request) -> None:
    """A parameter specmon cannot honour, set to anything but its "not used" value, is refused by name; so
    is stream_options without stream (as OpenAI answers), and vLLM's continuous_usage_stats (usage comes once)."""
    options = request.stream_options
    if options is not None and not request.stream:
        raise ApiError(
            400,
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            param="stream_options",
            code="invalid_value",
        )
    if options is not None and options.continuous_usage_stats:
        raise ApiError(
            400,
            "`stream_options.continuous_usage_stats` is not supported by specmon serve: usage comes once, "
            "on its own chunk before [DONE] (include_usage); leave it out",
            param="stream_options.continuous_usage_stats",
            code="unsupported_parameter",
        )
    for name, neutral in UNSUPPORTED.items():
        value = getattr(request, name, None)
        if not any(value == ok and type(value) is type(ok) or value is ok for ok in neutral):
            if name == "n" and isinstance(value, int):
                message = f"n = {value}: specmon decodes one choice per request (batch 1); use n = 1"
            else:
                why = f": {UNSUPPORTED_WHY[name]}" if name in UNSUPPORTED_WHY else ""
                message = f"`{name}` is not supported by specmon serve{why} (got {_short(value)}); leave it out"
            raise ApiError(400, message, param=name, code="unsupported_parameter")


def for_terminal(text: str) -> str:
    """Text a client controls (a path, a class name, a header), with every character a terminal would
    act on (escape sequences, NUL, line breaks, bidi overrides) written as its Python escape."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def _short(value) -> str:
    text = msgspec.json.encode(value).decode()
    return text if len(text) <= 60 else text[:57] + "..."


def status_error(request, exc) -> ApiError:
    """Starlette's own refusals (an HTTPException: no such route, wrong method) in the one shape."""
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
    return ApiError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}", code=code)
