"""Session logs: append-only, framed and checked (format in specmon.events.frames).

The preamble (magic, format version) is followed by SessionStarted, which carries the header
facts: specmon version, profile text, policy text and hash, host. Then one frame per event.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

from specmon.errors import SpecmonError
from specmon.events.frames import FrameDecoder, LogDamaged, frame, preamble
from specmon.events.schema import AnyEvent, Event, SessionFinished

__all__ = ["LogDamaged", "LogWriter", "read_log", "follow_log", "default_log_path"]
CHUNK = 1 << 16


class LogWriter:
    """Appends framed events; every batch goes straight to the OS (see LogSink for the thread).

    Writes are unbuffered, so a failed write (disk full) leaves no half-written frame behind:
    the file is cut back to its last whole frame and the error is raised."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh: BinaryIO = open(self.path, "ab", buffering=0)
        except OSError as exc:
            raise SpecmonError(f"{self.path}: cannot create the session log ({exc.strerror})") from None
        self._good = self._fh.tell()  # end of the last whole frame
        self.events_written = 0
        if self._good == 0:
            try:
                self._append(preamble())
            except OSError as exc:
                self._fh.close()
                self.path.unlink(missing_ok=True)  # an empty file would later read as "not a log"
                raise SpecmonError(f"{self.path}: cannot write the session log ({exc.strerror})") from None

    def write_frames(self, frames: list[bytes]) -> None:
        self._append(b"".join(frames))  # into the OS: a SIGKILL after this loses nothing
        self.events_written += len(frames)

    def _append(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[self._fh.write(view):]
        except OSError:
            os.ftruncate(self._fh.fileno(), self._good)  # readers then see only whole frames
            raise
        self._good += len(data)

    def write(self, event: Event) -> None:
        self.write_frames([frame(event)])

    def close(self) -> None:
        if not self._fh.closed:
            try:
                os.fsync(self._fh.fileno())
            except OSError:
                pass  # every frame is already in the OS; a failed fsync loses nothing we can keep
            self._fh.close()

    def __enter__(self) -> "LogWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _open(path: Path) -> BinaryIO:
    try:
        return open(path, "rb")
    except OSError as exc:
        raise SpecmonError(f"{path}: cannot open log ({exc.strerror})") from None


def read_log(path: Path) -> Iterator[AnyEvent]:
    """Yield every whole event in order; on damage, raise LogDamaged after the last good one.

    Reads in 64 KiB chunks, so memory stays flat however long the log is.
    """
    decoder = FrameDecoder(str(path))
    with _open(Path(path)) as fh:
        while chunk := fh.read(CHUNK):
            yield from decoder.feed(chunk)
    decoder.finish()


def follow_log(path: Path, poll_s: float = 0.05, idle_timeout_s: float | None = None,
               stop: Callable[[], bool] = lambda: False) -> Iterator[AnyEvent]:
    """Like `tail -f`: yield events as they are appended, until SessionFinished, `stop()`,
    or no new bytes for `idle_timeout_s`. A partial frame at the end is waited for, not an error."""
    decoder = FrameDecoder(str(path))
    idle_since = time.monotonic()
    with _open(Path(path)) as fh:
        while True:
            chunk = fh.read(CHUNK)
            if chunk:
                idle_since = time.monotonic()
                for event in decoder.feed(chunk):
                    yield event
                    if isinstance(event, SessionFinished):
                        return
                continue
            if stop() or (idle_timeout_s is not None and time.monotonic() - idle_since > idle_timeout_s):
                decoder.finish()
                return
            time.sleep(poll_s)


def default_log_path(session_id: str, logs_dir: Path | None = None) -> Path:
    return Path(logs_dir or os.environ.get("SPECMON_LOGS", "logs")) / f"{session_id}.specmon"
