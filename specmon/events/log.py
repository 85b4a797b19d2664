"""Session logs: append-only, framed and checked.

Layout: MAGIC (8 bytes), format version (u16, big-endian), then one frame per event:
payload length (u32), CRC-32 of the payload (u32), payload (msgpack event). The first event
is always SessionStarted, which carries the header facts (profile, versions, host).
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import BinaryIO, Iterator

import msgspec

from specmon.errors import SpecmonError
from specmon.events.schema import FORMAT_VERSION, AnyEvent, Event, decode, encode

MAGIC = b"SPECMON\x00"
_PREAMBLE = struct.Struct(">8sH")
_FRAME = struct.Struct(">II")
MAX_FRAME = 64 << 20  # no single event is this big; a larger length means damage


class LogDamaged(SpecmonError):
    """The log is truncated or corrupt at `offset`; every event before it was returned."""

    def __init__(self, path: Path, offset: int, reason: str):
        super().__init__(f"{path}: damaged at byte {offset}: {reason}")
        self.offset = offset


class LogWriter:
    """Appends framed events; flushes after every event so a crash loses at most the one in flight."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: BinaryIO = open(self.path, "ab")
        if self._fh.tell() == 0:
            self._fh.write(_PREAMBLE.pack(MAGIC, FORMAT_VERSION))
        self.events_written = 0

    def write(self, event: Event) -> None:
        payload = encode(event)
        self._fh.write(_FRAME.pack(len(payload), zlib.crc32(payload)) + payload)
        self._fh.flush()
        self.events_written += 1

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()

    def __enter__(self) -> "LogWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_log(path: Path) -> Iterator[AnyEvent]:
    """Yield every whole event in order; on damage, raise LogDamaged after the last good one.

    Reads frame by frame, so memory stays flat however long the log is.
    """
    path = Path(path)
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise SpecmonError(f"{path}: cannot open log ({exc.strerror})") from None
    with fh:
        _check_preamble(path, fh.read(_PREAMBLE.size))
        offset = _PREAMBLE.size
        while head := fh.read(_FRAME.size):
            yield _read_frame(path, fh, head, offset)
            offset = fh.tell()


def _check_preamble(path: Path, raw: bytes) -> None:
    if len(raw) < _PREAMBLE.size or raw[:8] != MAGIC:
        raise SpecmonError(f"{path}: not a specmon session log")
    version = _PREAMBLE.unpack(raw)[1]
    if version > FORMAT_VERSION:
        raise SpecmonError(f"{path}: log format {version} is newer than this specmon reads "
                           f"({FORMAT_VERSION}); upgrade specmon")


def _read_frame(path: Path, fh: BinaryIO, head: bytes, offset: int) -> AnyEvent:
    if len(head) < _FRAME.size:
        raise LogDamaged(path, offset, "truncated frame header")
    length, crc = _FRAME.unpack(head)
    if length > MAX_FRAME:
        raise LogDamaged(path, offset, f"implausible frame length {length}")
    payload = fh.read(length)
    if len(payload) < length:
        raise LogDamaged(path, offset, f"truncated event ({len(payload)} of {length} bytes)")
    if zlib.crc32(payload) != crc:
        raise LogDamaged(path, offset, "checksum mismatch")
    try:
        return decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise LogDamaged(path, offset, f"undecodable event ({exc})") from None


def default_log_path(session_id: str, logs_dir: Path | None = None) -> Path:
    return Path(logs_dir or os.environ.get("SPECMON_LOGS", "logs")) / f"{session_id}.specmon"
