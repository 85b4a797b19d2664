"""The upstream's own `timings` (llama-server: predicted_n/ms, prompt_n/ms, draft_n, draft_n_accepted),
read from a JSON reply or from a stream's server-sent events as they pass. Reading never alters what
is forwarded: the relay yields each chunk first and feeds a copy here afterwards."""

from __future__ import annotations

import msgspec

MAX_PENDING_BYTES = 1 << 20  # an event larger than this is not llama-server's: stop looking, keep relaying
MAX_JSON_BYTES = 16 << 20  # a JSON reply larger than this is relayed unread


class Timings(msgspec.Struct):
    """What llama-server reports per reply; draft_n only when the request drafted."""

    prompt_n: int | None = None
    prompt_ms: float | None = None
    predicted_n: int | None = None
    predicted_ms: float | None = None
    draft_n: int | None = None
    draft_n_accepted: int | None = None


class _Reply(msgspec.Struct):
    timings: Timings | None = None  # every other field is skipped unread


_decoder = msgspec.json.Decoder(_Reply)


def reply_timings(body: bytes) -> Timings | None:
    """The `timings` of one JSON object (a reply, or one event's data); None where it has none."""
    try:
        return _decoder.decode(body).timings
    except (msgspec.DecodeError, RecursionError):
        return None  # not an object, or timings of another shape: the reply is relayed all the same


class ReplyReader:
    """Reads a reply's timings from the copies it is fed: a JSON body once whole, or each complete
    server-sent event of a stream (the last event with timings wins: llama-server's final chunk)."""

    def __init__(self, content_type: str):
        """ "" for a reply nobody needs the timings of (a pass-through path): it is not read at all."""
        self.stream = content_type.split(";")[0].strip().lower() == "text/event-stream"
        self.timings: Timings | None = None
        self._pending = bytearray()
        self._given_up = not content_type

    def feed(self, chunk: bytes) -> None:
        if self._given_up:
            return
        self._pending += chunk
        if self.stream:
            self._read_events()
        elif len(self._pending) > MAX_JSON_BYTES:
            self._give_up()

    def close(self) -> None:
        """The reply ended: a JSON body is read now; a stream's unterminated last event is read too."""
        if self._given_up:
            return
        if self.stream:
            self._read_event(bytes(self._pending))
        else:
            self.timings = reply_timings(bytes(self._pending))
        self._pending.clear()

    def _read_events(self) -> None:
        while True:
            end, sep = _event_end(self._pending)
            if end < 0:
                break
            self._read_event(bytes(self._pending[:end]))
            del self._pending[: end + sep]
        if len(self._pending) > MAX_PENDING_BYTES:
            self._give_up()

    def _read_event(self, event: bytes) -> None:
        if b'"timings"' not in event:
            return  # most chunks carry only text: skip the JSON decode
        data = b"\n".join(line[5:].lstrip(b" ") for line in event.splitlines() if line.startswith(b"data:"))
        found = reply_timings(data)
        if found is not None:
            self.timings = found

    def _give_up(self) -> None:
        self._given_up = True
        self._pending = bytearray()


def _event_end(buf: bytearray) -> tuple[int, int]:
    """(where the first complete event ends, the separator's length); (-1, 0) while none is complete."""
    found = [(i, len(sep)) for sep in (b"\n\n", b"\r\n\r\n", b"\r\r") if (i := buf.find(sep)) >= 0]
    return min(found) if found else (-1, 0)
