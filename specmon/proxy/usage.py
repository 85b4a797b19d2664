"""Asking upstreams for the figures their family sends only on request, and handing the client exactly
the reply it asked for.

TabbyAPI sends `usage` (its accepted and rejected draft tokens, its decode time) only to a request with
`stream_options.include_usage`, streamed or not (endpoints/OAI/utils/chat_completion.py at
e632af41eba68abeadc3437c62674360f2f8cbf1: `return_usage`); vLLM puts its per-request `metrics` on a
stream's usage chunk, sent only when asked (docs/features/per_request_metrics.md at
0377ba9ad8ebdae7900b9ce41a7a6c00dca7c496; that page names no request field of its own for `metrics`,
only the server's --enable-per-request-metrics). So where the client did not ask, the proxy asks:
- a stream, to any upstream not known as llama-server (whose last chunk carries `timings` anyway);
- a reply sent whole, only to an upstream known as TabbyAPI (vLLM refuses stream_options there, and
  sends usage unasked).
The client then gets the reply without what it did not ask for: a stream's usage chunk with no
choices (vLLM's, OpenAI's shape) is dropped; a usage carried beside a choice (TabbyAPI's last chunk
holds the finish_reason too) is cut out of that chunk's JSON, every other byte kept; llama-server's
usage, which comes unasked beside its `timings`, is left alone. A reply sent whole keeps its `usage`
(the standard object there)."""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from specmon.proxy.evidence import LLAMA_SERVER, TABBYAPI
from specmon.proxy.reader import event_end

MARK = b'"usage"'
MAX_EVENT_BYTES = 1 << 20  # a usage chunk is a few hundred bytes; a longer event is relayed as it comes
LLAMA_TIMINGS = b'"timings"'  # llama-server sends usage unasked, beside its timings: never its to cut
SPACE = re.compile(r"[ \t\r\n]*")  # JSON's whitespace


def asking(fields: dict[str, Any], family: str) -> bytes | None:
    """The request body with stream_options.include_usage set (the client's other options kept), where the
    proxy asks an upstream of `family` ("" while unknown) for it; None where it does not."""
    options = fields.get("stream_options")
    options = options if isinstance(options, dict) else {}
    wanted = family != LLAMA_SERVER if fields.get("stream") is True else family == TABBYAPI  # as the module says
    if not fields or not wanted or options.get("include_usage") is True:  # or the client asked itself
        return None
    return msgspec.json.encode({**fields, "stream_options": {**options, "include_usage": True}})


class UsageCut:
    """A stream's bytes less the usage the client did not ask for; from an event past MAX_EVENT_BYTES, as they come."""

    def __init__(self):
        self._pending = b""
        self._scanned = 0  # bytes of _pending already searched for an event's end
        self._passing = False

    def feed(self, chunk: bytes) -> bytes:
        if self._passing:
            return chunk
        self._pending += chunk
        out = []
        while (end := event_end(self._pending, max(0, self._scanned - 3))) > 0:
            event, self._pending, self._scanned = self._pending[:end], self._pending[end:], 0
            out.append(without_usage(event))
        self._scanned = len(self._pending)
        if len(self._pending) > MAX_EVENT_BYTES:
            self._passing = True
            out.append(self._pending)
            self._pending = b""
        return b"".join(out)

    def close(self) -> bytes:
        return without_usage(self._pending)


def without_usage(event: bytes) -> bytes:
    """The event with its usage taken out: b"" where that leaves no choice (a usage chunk)."""
    if MARK not in event or LLAMA_TIMINGS in event:
        return event
    start = event.find(b"data:")
    body_at = start + 5 + (event[start + 5 : start + 6] == b" ")
    end = event.rfind(b"}") + 1
    if start < 0 or end <= body_at:
        return event
    try:
        data = json.loads(event[body_at:end])
        if not isinstance(data, dict) or data.get("usage") is None:
            return event
        if not data.get("choices"):
            return b""
        text = event[body_at:end].decode("utf-8", "surrogatepass")
        members = _members(text)
    except (ValueError, UnicodeError):  # no JSON, or JSON json.loads took and the walk cannot: relayed as it came
        return event
    n = next((n for n, (key, _, _) in enumerate(members) if key == "usage"), None)
    if n is None:
        return event
    # the top-level `"usage": ...` member's bytes and one comma that joins it to the object
    if n + 1 < len(members):  # up to the next key: its comma goes with it
        lo, hi = members[n][1], members[n + 1][1]
    else:  # the last: from the end of the one before, so no comma is left dangling
        lo, hi = (members[n - 1][2] if n else members[n][1]), members[n][2]
    return event[: body_at + len(text[:lo].encode())] + event[body_at + len(text[:hi].encode()) :]


def _members(text: str) -> list[tuple[str, int, int]]:
    """An object's top-level members: (key, where its key begins, where its value ends)."""
    decoder, members, i = json.JSONDecoder(), [], 1
    while (i := _skip_space(text, i)) < len(text) and text[i] != "}":
        key_at = i
        key, i = decoder.raw_decode(text, i)
        _, i = decoder.raw_decode(text, _skip_space(text, _skip_space(text, i) + 1))  # past ":"
        members.append((key, key_at, i))
        i = _skip_space(text, i)
        i += text[i : i + 1] == ","
    return members


def _skip_space(text: str, i: int) -> int:
    return SPACE.match(text, i).end()
