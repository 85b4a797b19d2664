"""Session logs: always a new file, framed, numbered and checked (format in specmon.events.frames).

The preamble (magic, format version, log id) is followed by SessionStarted, which carries the header
facts: specmon version, profile text, policy text and hash, host. Then one frame per event.

A long session's log can rotate (Rotation): the live file keeps its name, NAME.specmon; a finished
part ends with LogRotated and is renamed NAME.1.specmon, NAME.2.specmon, ... in the order written (a
part's name never changes afterwards), and each new part opens with a copy of the header (its `part`
set), so every part reads on its own. follow_log goes from part to part as if there were one file.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import math
import os
import time
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

import msgspec

from specmon.errors import SpecmonError
from specmon.events.frames import FRAME_V2, LOG_ID_SIZE, PREAMBLE, FrameDecoder, FrameEncoder, LogDamaged
from specmon.events.parts import Rotation, link_part, part_path
from specmon.events.schema import AnyEvent, Event, LogRotated, SessionFinished, SessionStarted, decode, encode

CHUNK = 1 << 16
FOLLOW_IDLE_S = 10.0  # a followed log this long without growth and without a writer: its session is gone


class LogWriter:
    """Writes a new log, numbering its frames from 0; every batch goes straight to the OS (see
    LogSink for the thread).

    The file must not exist: a log is never appended to an older one or to another file. Writes
    are unbuffered, so a failed write (disk full) leaves no half-written frame behind: the file is
    cut back to its last whole frame and the error is raised. While open, the writer holds an
    exclusive lock on the file, which tells followers the session is alive (the kernel drops it
    when the process dies). With a Rotation, the log goes on in new files (see the module's doc)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.rotation: Rotation | None = None  # set by the session (transport.session), which checks the parts' names
        self.part = 1  # the live file's number among the session's parts
        self._header: SessionStarted | None = None  # repeated at the start of every later part
        self._format = FrameEncoder()
        self._good = 0  # end of the last whole frame
        self.events_written = 0  # in the live part; also its next frame's sequence number
        self._rotate_asked = False  # set by a signal's handler: rotate before the next batch
        self._fh = _create(self.path)
        with contextlib.suppress(OSError):  # no locks on this filesystem: followers judge by the idle timeout alone
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            self._append(self._format.preamble())
        except OSError as exc:
            self._fh.close()
            self.path.unlink(missing_ok=True)  # an empty file would later read as "not a log"
            raise SpecmonError(f"{self.path}: cannot write the session log ({exc.strerror})") from None

    def write_payloads(self, payloads: list[bytes]) -> None:
        """Frame encoded events (schema.encode) in order and write them in one go; where the Rotation's
        size is passed, the rest goes on in a new part."""
        if self.events_written == 0 and self.part == 1 and payloads:
            with contextlib.suppress(msgspec.DecodeError):  # not an event: a later part then starts without a header
                header = decode(payloads[0])
                self._header = header if isinstance(header, SessionStarted) else None
        elif self._rotate_asked and payloads:
            self.rotate()  # asked for since the last batch: what comes after the ask opens the new part
        limit = getattr(self.rotation, "max_bytes", None) or math.inf  # None: rotate only when asked
        while payloads:
            ends = itertools.accumulate((FRAME_V2.size + len(p) for p in payloads), initial=self._good)
            # the live part takes them up to and including the one that fills it
            taken = next((n for n, end in enumerate(ends) if n and end >= limit), len(payloads))
            self._frames(payloads[:taken])
            payloads = payloads[taken:]
            if self._good >= limit:
                self.rotate()

    def _frames(self, payloads: list[bytes]) -> None:
        first = self.events_written
        self._append(b"".join(self._format.frame(p, first + i) for i, p in enumerate(payloads)))
        self.events_written += len(payloads)  # into the OS: a SIGKILL after this loses nothing

    def rotate_soon(self) -> None:
        """Rotate before the next batch, on the writer's thread (safe in a signal handler)."""
        self._rotate_asked = True

    def rotate_if_asked(self) -> None:
        if self._rotate_asked and self.events_written:
            self.rotate()

    def rotate(self) -> None:
        """Finish the live part with LogRotated and go on in a new file under its name.

        The new part is whole (preamble, header) before the live name moves to it, and the old part keeps
        every frame, so a crash at any step loses no written event; the live name is never missing
        where the filesystem has hard links."""
        self._rotate_asked = False
        done, nxt = part_path(self.path, self.part), self._next_part()
        linked = False
        try:
            if self._header is not None:
                nxt.write(msgspec.structs.replace(self._header, part=self.part + 1))
            linked = link_part(self.path, done)
            marker = LogRotated(
                session_id=self._header.session_id if self._header else "",
                t=time.time(),
                part=self.part,
                next_name=self.path.name,
                next_log_id=nxt._format.log_id.hex(),
            )
            self._frames([encode(marker)])
            if not linked:  # no hard links here: the live name is missing for a moment
                os.rename(self.path, done)
            os.rename(nxt.path, self.path)
        except BaseException:
            nxt.close()
            nxt.path.unlink(missing_ok=True)
            if linked and self.path.exists():
                done.unlink(missing_ok=True)  # the live name still holds every frame: no second name for it
            raise
        old, self._fh = self._fh, nxt._fh
        self._format, self._good, self.events_written = nxt._format, nxt._good, nxt.events_written
        self.part += 1
        _close(old)  # after the new part is locked: a follower never sees the session without a writer
        keep = getattr(self.rotation, "keep", None)  # the part past `keep` goes; a reader with it open reads on
        if keep is not None and self.part - 1 - keep >= 1:
            part_path(self.path, self.part - 1 - keep).unlink(missing_ok=True)

    def _next_part(self) -> "LogWriter":
        """The next part, locked, under a name no reader looks for until it is renamed (rotate writes its header)."""
        temp = self.path.with_name(self.path.name + ".next")
        temp.unlink(missing_ok=True)  # left by a rotation that crashed: it holds a header, nothing more
        try:
            return LogWriter(temp)
        except SpecmonError as exc:  # as a full disk: the log's writer reports an OSError
            raise OSError(errno.EIO, str(exc)) from None

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
        _close(self._fh)

    def __enter__(self) -> "LogWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _close(fh: BinaryIO) -> None:
    if not fh.closed:
        with contextlib.suppress(OSError):  # every frame is already in the OS; a failed fsync loses nothing we can keep
            os.fsync(fh.fileno())
        fh.close()


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
    """Yield every whole event in order; on damage, raise LogDamaged after the last good one. Reads CHUNK
    bytes at a time, so memory stays flat however long the log is."""
    decoder = FrameDecoder(str(path))
    with _open(Path(path)) as fh:
        while chunk := fh.read(CHUNK):
            yield from decoder.feed(chunk)
    decoder.finish()


def follow_log(path: Path, **follow) -> Iterator[AnyEvent]:
    """Like `tail -F`: yield events as they are appended, until SessionFinished or `stop()`.

    A partial frame at the end is waited for, not an error. A session that is alive but slow is
    waited for however long its rounds take (its writer holds the log's lock). A log that has not
    grown for `idle_timeout_s` and that no writer holds any more (its session was killed) ends
    with a SpecmonError after its last event; `idle_timeout_s=None` waits forever regardless.
    A rotated log is read on into its next part as if it were one file: the parts' LogRotated and
    repeated headers are not handed out. Takes follow_batches' arguments."""
    return itertools.chain.from_iterable(follow_batches(path, **follow))


def follow_batches(
    path: Path,
    poll_s: float = 0.05,
    idle_timeout_s: float | None = FOLLOW_IDLE_S,
    stop: Callable[[], bool] = lambda: False,
) -> Iterator[list[AnyEvent]]:
    """follow_log's events, a list per read (what the attach server sends in one go)."""
    path = Path(path)
    fh, repeat_header = _open(path), False
    try:
        while True:
            marker = yield from _follow_part(fh, path, poll_s, idle_timeout_s, stop, repeat_header)
            if marker is None or (found := _await_next_part(marker, fh, path, poll_s, idle_timeout_s, stop)) is None:
                return
            fh.close()
            (fh, path), repeat_header = found, True
    finally:
        fh.close()


def _follow_part(fh: BinaryIO, path: Path, poll_s, idle_timeout_s, stop, repeat_header: bool):
    """Yield one part's events in batches; return its LogRotated, or None at its end or `stop()`."""
    decoder = FrameDecoder(str(path))
    idle_since = time.monotonic()
    writer_gone = False  # seen unlocked: every byte it will ever hold is already written
    while True:
        chunk = fh.read(CHUNK)
        if chunk:
            idle_since = time.monotonic()
            batch: list[AnyEvent] = []
            try:
                for event in decoder.feed(chunk):
                    if repeat_header and isinstance(event, SessionStarted):
                        repeat_header = False  # the header again, opening a later part: the reader has it
                        continue
                    repeat_header = False
                    if isinstance(event, LogRotated):
                        yield batch
                        return event
                    batch.append(event)
                    if isinstance(event, SessionFinished):
                        yield batch
                        return None
            except LogDamaged:
                yield batch  # every whole event before the damage first
                raise
            yield batch
            continue
        if stop():
            decoder.finish()
            return None
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


def _await_next_part(marker: LogRotated, fh: BinaryIO, path: Path, poll_s, idle_timeout_s, stop):
    """The part that follows `marker`'s, opened: the live file until it is renamed, then its part name. A
    writer that let go of the old part without either in place crashed mid-rotation."""
    live = path.parent / marker.next_name
    candidates, want = (part_path(live, marker.part + 1), live), bytes.fromhex(marker.next_log_id)
    since = time.monotonic()
    while (found := _open_part(candidates, want)) is None:
        if stop():
            return None
        waited = time.monotonic() - since
        if idle_timeout_s is not None and waited > idle_timeout_s and not _writer_alive(fh):
            if (found := _open_part(candidates, want)) is not None:
                return found  # renamed just before the writer let go
            raise SpecmonError(
                f"{path} goes on in {live.name} (part {marker.part + 1}), which is not there: its session "
                "was killed mid-rotation, or --log-keep removed that part"
            )
        time.sleep(poll_s)
    return found


def _open_part(candidates: tuple[Path, ...], log_id: bytes) -> tuple[BinaryIO, Path] | None:
    """The first candidate whose preamble carries `log_id`, opened at its start."""
    for candidate in candidates:
        try:
            fh = open(candidate, "rb")
        except OSError:
            continue
        if fh.read(PREAMBLE.size + LOG_ID_SIZE)[PREAMBLE.size :] == log_id:
            fh.seek(0)
            return fh, candidate
        fh.close()
    return None


def default_log_path(session_id: str) -> Path:
    return Path(os.environ.get("SPECMON_LOGS", "logs")) / f"{session_id}.specmon"
