"""Session logs: always a new file, framed, numbered and checked (format in specmon.events.frames).

The preamble (magic, format version, log id) is followed by SessionStarted, which carries the header
facts: specmon version, profile text, policy text and hash, host. Then one frame per event.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

from specmon.errors import SpecmonError
from specmon.events.frames import FrameDecoder, FrameEncoder, LogDamaged
from specmon.events.schema import AnyEvent, Event, SessionFinished, encode

__all__ = ["LogDamaged", "LogWriter", "read_log", "follow_log", "default_log_path"]
CHUNK = 1 << 16
FOLLOW_IDLE_S = 10.0  # a followed log this long without growth and without a writer: its session is gone


class LogWriter:
    """Writes a new log, numbering its frames from 0; every batch goes straight to the OS (see
    LogSink for the thread).

    The file must not exist: a log is never appended to an older one or to another file. Writes
    are unbuffered, so a failed write (disk full) leaves no half-written frame behind: the file is
    cut back to its last whole frame and the error is raised. While open, the writer holds an
    exclusive lock on the file, which tells followers the session is alive (the kernel drops it
    when the process dies)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._format = FrameEncoder()
        self._good = 0  # end of the last whole frame
        self.events_written = 0  # also the next frame's sequence number
        self._fh = _create(self.path)
        _hold_writer_lock(self._fh)
        try:
            self._append(self._format.preamble())
        except OSError as exc:
            self._fh.close()
            self.path.unlink(missing_ok=True)  # an empty file would later read as "not a log"
            raise SpecmonError(f"{self.path}: cannot write the session log ({exc.strerror})") from None

    def write_payloads(self, payloads: list[bytes]) -> None:
        """Frame encoded events (schema.encode) in order and write them in one go."""
        first = self.events_written
        self._append(b"".join(self._format.frame(p, first + i) for i, p in enumerate(payloads)))
        self.events_written += len(payloads)  # into the OS: a SIGKILL after this loses nothing

    def _append(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[self._fh.write(view) :]
        except OSError:
            os.ftruncate(self._fh.fileno(), self._good)  # readers then see only whole frames
            raise
        self._good += len(data)

    def write(self, event: Event) -> None:
        self.write_payloads([encode(event)])

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


def _create(path: Path) -> BinaryIO:
    """Open a new file for writing; an existing one (even a log) is refused, never appended to."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecmonError(f"{path}: cannot create the session log ({exc.strerror})") from None
    try:
        return open(path, "xb", buffering=0)  # O_EXCL: a file created meanwhile is refused too
    except FileExistsError:
        raise SpecmonError(f"{path} exists; pick a new file or remove it") from None
    except OSError as exc:
        raise SpecmonError(f"{path}: cannot create the session log ({exc.strerror})") from None


def _hold_writer_lock(fh: BinaryIO) -> None:
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        pass  # no locks on this filesystem: followers judge by the idle timeout alone


def _writer_alive(fh: BinaryIO) -> bool:
    """Does a LogWriter (of any process) still hold this log open?"""
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False  # no locks here: nothing says the writer lives
    fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    return False


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


def follow_log(
    path: Path,
    poll_s: float = 0.05,
    idle_timeout_s: float | None = FOLLOW_IDLE_S,
    stop: Callable[[], bool] = lambda: False,
) -> Iterator[AnyEvent]:
    """Like `tail -f`: yield events as they are appended, until SessionFinished or `stop()`.

    A partial frame at the end is waited for, not an error. A session that is alive but slow is
    waited for however long its rounds take (its writer holds the log's lock). A log that has not
    grown for `idle_timeout_s` and that no writer holds any more (its session was killed) ends
    with a SpecmonError after its last event; `idle_timeout_s=None` waits forever regardless."""
    decoder = FrameDecoder(str(path))
    idle_since = time.monotonic()
    writer_gone = False  # seen unlocked: every byte it will ever hold is already written
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
            if stop():
                decoder.finish()
                return
            if writer_gone:
                decoder.finish()
                raise SpecmonError(
                    f"{path} has not grown for {idle_timeout_s:g} s and has no SessionFinished: its "
                    f"session was killed or hung; `specmon log info {path}` shows what it holds"
                )
            if idle_timeout_s is not None and time.monotonic() - idle_since > idle_timeout_s:
                if not _writer_alive(fh):
                    writer_gone = True
                    continue  # read once more: the writer may have written its last frames just before
                idle_since = time.monotonic()  # alive, only slow: look again after another wait
            time.sleep(poll_s)


def default_log_path(session_id: str, logs_dir: Path | None = None) -> Path:
    return Path(logs_dir or os.environ.get("SPECMON_LOGS", "logs")) / f"{session_id}.specmon"
