"""Incremental frame decoding: the one parser behind log files, followed logs and sockets.

Bytes arrive in any chunking; whole events come out in order. Damage (bad magic, a frame
that fails its checksum, an implausible length, a frame out of order) raises LogDamaged naming
the byte offset, after every whole event before it has been handed out. Memory stays within
one fed chunk and one partial frame.

Format 2 (written by LogWriter): preamble = magic, version, an 8-byte random log id; each frame
= length, sequence number (0, 1, 2, ...), CRC-32 seeded with the log id over length, sequence
number and payload, msgpack payload. So a duplicated, reordered or missing frame fails the
sequence check, and a frame spliced in from another log fails the checksum.
Format 1 (older logs, still read as before): preamble = magic, version; frame = length, CRC-32
of the payload, payload.
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import Iterator

import msgspec

from specmon.errors import SpecmonError
from specmon.events.schema import FORMAT_VERSION, AnyEvent, decode

MAGIC = b"SPECMON\x00"
PREAMBLE = struct.Struct(">8sH")  # magic, format version: the same in every format
LOG_ID_SIZE = 8  # format 2: follows the preamble
FRAME_V1 = struct.Struct(">II")  # length, CRC-32 of the payload
FRAME_V2 = struct.Struct(">III")  # length, sequence number, CRC-32 (log id seed; length, seq, payload)
_LENGTH_SEQ, _CRC = struct.Struct(">II"), struct.Struct(">I")
SEQ_MASK = 0xFFFFFFFF  # sequence numbers wrap at 2**32 frames rather than overflow
MAX_FRAME = 64 << 20  # no event is this big; a larger length means damage


class LogDamaged(SpecmonError):
    """The stream is truncated or corrupt at `offset`; every event before it was returned."""

    def __init__(self, source: str, offset: int, reason: str):
        super().__init__(f"{source}: damaged at byte {offset}: {reason}")
        self.offset = offset
        self.reason = reason


class FrameEncoder:
    """Format 2: the preamble and numbered frames of one log, bound to it by a random log id."""

    def __init__(self) -> None:
        self.log_id = os.urandom(LOG_ID_SIZE)
        self._seed = zlib.crc32(self.log_id)

    def preamble(self) -> bytes:
        return PREAMBLE.pack(MAGIC, 2) + self.log_id

    def frame(self, payload: bytes, seq: int) -> bytes:
        """An encoded event as frame number `seq` (numbered from 0)."""
        head = _LENGTH_SEQ.pack(len(payload), seq & SEQ_MASK)
        return head + _CRC.pack(zlib.crc32(payload, zlib.crc32(head, self._seed))) + payload


class FrameDecoder:
    def __init__(self, source: str):
        self.source = source
        self._buf = bytearray()
        self._pos = 0  # bytes of _buf already handed out (dropped at the next feed, not per frame)
        self.offset = 0  # stream offset of _buf[_pos]: just past the last whole event handed out
        self._version: int | None = None  # known once the preamble is read
        self._seed = 0  # format 2: CRC-32 of the log id
        self._seq = 0  # format 2: the number the next frame must carry

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held back, waiting for the rest."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes) -> Iterator[AnyEvent]:
        del self._buf[: self._pos]
        self._pos = 0
        self._buf += data
        if self._version is None and not self._read_preamble():
            return
        yield from self._frames()

    def finish(self) -> None:
        """The stream ended: leftover bytes are a truncated frame."""
        if self._version is None:
            raise SpecmonError(f"{self.source}: not a specmon session log")
        if self.pending:
            raise LogDamaged(self.source, self.offset, f"truncated event ({self.pending} bytes of a frame)")

    def _read_preamble(self) -> bool:
        """Parse the preamble once all of it is here; False while it is still incomplete."""
        if len(self._buf) < PREAMBLE.size:
            return False
        magic, version = PREAMBLE.unpack_from(self._buf)
        if magic != MAGIC or version == 0:  # no specmon ever wrote format 0
            raise SpecmonError(f"{self.source}: not a specmon session log")
        if version > FORMAT_VERSION:
            raise SpecmonError(
                f"{self.source}: log format {version} is newer than this specmon reads "
                f"({FORMAT_VERSION}); upgrade specmon"
            )
        size = PREAMBLE.size + (LOG_ID_SIZE if version >= 2 else 0)
        if len(self._buf) < size:
            return False
        self._seed = zlib.crc32(self._buf[PREAMBLE.size : size])
        self._pos = self.offset = size
        self._version = version
        return True

    def _frames(self) -> Iterator[AnyEvent]:
        """The event of every whole, checked frame in the buffer; stops at a partial one."""
        header, check = (FRAME_V2, self._check_v2) if self._version >= 2 else (FRAME_V1, self._check_v1)
        buf = self._buf
        while len(buf) - self._pos >= header.size:
            fields = header.unpack_from(buf, self._pos)
            length, end = fields[0], self._pos + header.size + fields[0]
            if length > MAX_FRAME:
                raise LogDamaged(self.source, self.offset, f"implausible frame length {length}")
            if len(buf) < end:
                return
            payload = bytes(buf[self._pos + header.size : end])
            check(fields, payload)
            try:
                event = decode(payload)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise LogDamaged(self.source, self.offset, f"undecodable event ({exc})") from None
            self.offset += end - self._pos
            self._pos = end
            yield event

    def _check_v1(self, fields: tuple, payload: bytes) -> None:
        if zlib.crc32(payload) != fields[1]:
            raise LogDamaged(self.source, self.offset, "checksum mismatch")

    def _check_v2(self, fields: tuple, payload: bytes) -> None:
        _, seq, crc = fields
        if zlib.crc32(payload, zlib.crc32(self._buf[self._pos : self._pos + 8], self._seed)) != crc:
            raise LogDamaged(self.source, self.offset, "checksum mismatch (corrupt, or a frame of another log)")
        if seq != self._seq & SEQ_MASK:
            why = f"frame {seq} where frame {self._seq & SEQ_MASK} belongs (a duplicated, reordered or missing frame)"
            raise LogDamaged(self.source, self.offset, why)
        self._seq += 1
