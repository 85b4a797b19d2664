"""Reading a reply as it is relayed: the relay feeds each chunk here after it has sent it on, and the
reader finds the reply's evidence (proxy.evidence) in a JSON body once whole, or in each complete
server-sent event of a stream. It never raises into the relay, and never holds more than a bounded
part of a reply."""

from __future__ import annotations

import msgspec

from specmon.proxy.evidence import Evidence, reply_evidence

MAX_PENDING_BYTES = 1 << 20  # an event larger than this is no server's figures: stop looking, keep relaying
MAX_JSON_BYTES = 16 << 20  # a JSON reply larger than this is relayed unread
# an event without one of these carries neither figures nor a family's mark: skip its JSON decode
MARKS = (b'"timings"', b'"metrics"', b'"usage"', b'"stop_reason"', b'"eos_reason"')


class ReplyReader:
    """A stream's family from the first event that shows one; its figures from the last that carries them."""

    def __init__(self, content_type: str):
        """ "" for a reply nobody needs the evidence of (a pass-through path): it is not read at all."""
        self.stream = content_type.split(";")[0].strip().lower() == "text/event-stream"
        self.family = ""
        self.found: Evidence | None = None
        self.unmeasured = ""  # the first reason an event's figures were out of range: the reply's, whatever follows
        self._pending = bytearray()
        self._given_up = not content_type
        self._scanned = 0  # bytes of _pending already searched for an event's end

    @property
    def evidence(self) -> Evidence | None:
        """None where no event or body had any shape read here."""
        if self.unmeasured:
            return Evidence(self.family, unmeasured=self.unmeasured)
        if self.found is None:
            return Evidence(self.family) if self.family else None
        return msgspec.structs.replace(self.found, family=self.family or self.found.family)

    def feed(self, chunk: bytes) -> None:
        if self._given_up:
            return
        self._pending += chunk
        try:
            while self.stream and (stop := event_end(self._pending, max(0, self._scanned - 3))) > 0:
                self._read_event(bytes(self._pending[:stop]))
                del self._pending[:stop]
                self._scanned = 0
            self._scanned = len(self._pending)  # the next feed searches only what it adds (and a separator's start)
            if len(self._pending) > (MAX_PENDING_BYTES if self.stream else MAX_JSON_BYTES):
                self._give_up()
        except Exception as exc:  # noqa: BLE001 - the relay calls this between sends: reading must never break it
            self._give_up(exc)

    def close(self) -> None:
        """The reply ended: a JSON body is read now; a stream's unterminated last event is read too."""
        if self._given_up:
            return
        try:
            if self.stream:
                self._read_event(bytes(self._pending))
            else:
                self._take(reply_evidence(bytes(self._pending)))
        except Exception as exc:  # noqa: BLE001 - as feed: a reply the reader cannot read is unmeasured, not lost
            self._give_up(exc)
        self._pending.clear()

    def _read_event(self, event: bytes) -> None:
        if not any(mark in event for mark in MARKS):
            return  # most chunks carry only text: skip the JSON decode
        data = b"\n".join(line[5:].lstrip(b" ") for line in event.splitlines() if line.startswith(b"data:"))
        self._take(reply_evidence(data))

    def _take(self, found: Evidence | None) -> None:
        if found is None:
            return
        self.family = self.family or found.family
        if found.unmeasured:
            self.unmeasured = self.unmeasured or found.unmeasured
        elif found.draft_n is not None or found.predicted_n is not None:  # it has figures, not a family alone
            self.found = found

    def _give_up(self, unreadable: Exception | None = None) -> None:
        if unreadable is not None:
            self.unmeasured = self.unmeasured or f"unreadable ({type(unreadable).__name__})"
        self._given_up = True
        self._pending = bytearray()


def event_end(buf: bytes | bytearray, start: int = 0) -> int:
    """Where the first complete server-sent event ends, its blank line included (searched from `start`);
    0 while none is complete. The reader and the usage cut (proxy.usage) split a stream by it."""
    found = [(i, len(sep)) for sep in (b"\n\n", b"\r\n\r\n", b"\r\r") if (i := buf.find(sep, start)) >= 0]
    return sum(min(found)) if found else 0
