"""Incremental frame decoding: the one parser behind log files, followed logs and sockets.

Bytes arrive in any chunking; whole events come out in order. Damage (bad magic, a frame
that fails its checksum, an implausible length) raises LogDamaged naming the byte offset,
after every whole event before it has been handed out. Only one partial frame is buffered.
"""

from __future__ import annotations

import struct
import zlib
from typing import Iterator

import msgspec

from specmon.errors import SpecmonError
from specmon.events.schema import FORMAT_VERSION, AnyEvent, decode, encode

MAGIC = b"SPECMON\x00"
PREAMBLE = struct.Struct(">8sH")
FRAME = struct.Struct(">II")
MAX_FRAME = 64 << 20  # no event is this big; a larger length means damage


class LogDamaged(SpecmonError):
    """The stream is truncated or corrupt at `offset`; every event before it was returned."""

    def __init__(self, source: str, offset: int, reason: str):
        super().__init__(f"{source}: damaged at byte {offset}: {reason}")
        self.offset = offset
        self.reason = reason


def preamble() -> bytes:
    return PREAMBLE.pack(MAGIC, FORMAT_VERSION)


def frame(event) -> bytes:
    """One event, framed: length, CRC-32, msgpack payload."""
    payload = encode(event)
    return FRAME.pack(len(payload), zlib.crc32(payload)) + payload


class FrameDecoder:
    def __init__(self, source: str):
        self.source = source
        self._buf = bytearray()
        self._offset = 0  # stream offset of _buf[0]
        self._started = False

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held back, waiting for the rest."""
        return len(self._buf)

    @property
    def offset(self) -> int:
        """Stream offset just past the last whole event handed out."""
        return self._offset

    def feed(self, data: bytes) -> Iterator[AnyEvent]:
        self._buf += data
        if not self._started:
            if len(self._buf) < PREAMBLE.size:
                return
            self._check_preamble()
        while len(self._buf) >= FRAME.size:
            length, crc = FRAME.unpack_from(self._buf)
            if length > MAX_FRAME:
                raise LogDamaged(self.source, self._offset, f"implausible frame length {length}")
            end = FRAME.size + length
            if len(self._buf) < end:
                return
            payload = bytes(self._buf[FRAME.size:end])
            if zlib.crc32(payload) != crc:
                raise LogDamaged(self.source, self._offset, "checksum mismatch")
            try:
                event = decode(payload)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise LogDamaged(self.source, self._offset, f"undecodable event ({exc})") from None
            del self._buf[:end]
            self._offset += end
            yield event

    def finish(self) -> None:
        """The stream ended: leftover bytes are a truncated frame."""
        if not self._started:
            if self._buf or self._offset == 0:
                raise SpecmonError(f"{self.source}: not a specmon session log")
        elif self._buf:
            raise LogDamaged(self.source, self._offset, f"truncated event ({len(self._buf)} bytes of a frame)")

    def _check_preamble(self) -> None:
        magic, version = PREAMBLE.unpack_from(self._buf)
        if magic != MAGIC:
            raise SpecmonError(f"{self.source}: not a specmon session log")
        if version > FORMAT_VERSION:
            raise SpecmonError(f"{self.source}: log format {version} is newer than this specmon reads "
                               f"({FORMAT_VERSION}); upgrade specmon")
        del self._buf[:PREAMBLE.size]
        self._offset = PREAMBLE.size
        self._started = True
