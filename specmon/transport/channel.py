"""Live fan-out: the decode loop publishes; the log writer and viewers each receive every event.

- The log sink is lossless and never blocks the decode loop: an unbounded queue drained by its
  own thread, which writes and flushes each batch (at least once per round).
- Viewers (the TUI, the policy engine) get a bounded buffer: a slow one skips the oldest
  events, and the skip is counted so it can be shown, never silent.
"""

from __future__ import annotations

import collections
import queue
import threading
from pathlib import Path
from typing import Callable

from specmon.errors import SpecmonError
from specmon.events.log import LogWriter
from specmon.events.schema import AnyEvent, RoundVerified, encode

_ROTATE = object()  # wakes the writer to rotate with nothing to write
_CLOSE = object()


class LogWriteFailed(SpecmonError):
    """The session log could not be written (disk full or gone); what was written still reads."""


class Subscription:
    """A viewer's bounded buffer. `drain()` takes everything buffered; `skipped` counts losses."""

    def __init__(self, maxlen: int):
        self._buf: collections.deque = collections.deque(maxlen=maxlen)
        self._lock = threading.Lock()
        self.skipped = 0

    def offer(self, event: AnyEvent) -> None:
        with self._lock:
            if len(self._buf) == self._buf.maxlen:
                self.skipped += 1  # the deque drops its oldest entry
            self._buf.append(event)

    def drain(self) -> list[AnyEvent]:
        with self._lock:
            batch = list(self._buf)
            self._buf.clear()
        return batch


class LogSink:
    """Writes every event to the session log on its own thread. The log must be a new file: an existing
    one raises SpecmonError here, before anything starts."""

    def __init__(self, path: Path):
        self.writer = LogWriter(path)
        self.path = self.writer.path
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self.closed = False
        self.error: BaseException | None = None
        self.rounds_written = 0  # RoundVerified frames on disk: SessionFinished's count, exact under signals
        self._thread = threading.Thread(target=self._run, name="specmon-log", daemon=True)
        self._thread.start()

    def offer(self, payload: bytes, is_round: bool = False) -> None:
        """An encoded event; the writer thread numbers and frames it in the order offered.
        One put, so a signal lands either before the event is queued or after: never half-way."""
        self._queue.put((payload, is_round))

    def rotate_soon(self) -> None:
        """Rotate the log now, on the writer's thread, even with no event to write (safe in a signal
        handler: SimpleQueue.put is reentrant). Events offered after it go to the new part."""
        self.writer.rotate_soon()
        self._queue.put(_ROTATE)

    def sync(self) -> None:
        """Wait until everything offered so far has been written (or failed to be)."""
        passed = threading.Event()
        self._queue.put(passed)
        while self._thread.is_alive() and not passed.wait(timeout=1.0):
            pass  # once closed (or dead), nothing more will be written

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while not self._queue.empty():
                batch.append(self._queue.get())
            done = batch[-1] is _CLOSE
            frames = [b for b in batch if isinstance(b, tuple)]
            try:
                if frames and self.error is None:  # after a failure, later frames would leave a gap
                    self.writer.write_payloads([payload for payload, _ in frames])
                    self.rounds_written += sum(is_round for _, is_round in frames)
                elif _ROTATE in batch and self.error is None:
                    self.writer.rotate_if_asked()  # an idle log: the signal's rotation need not wait for an event
            except OSError as exc:  # disk full or gone: remember it; the publisher raises it
                self.error = exc
            for passed in batch:
                if isinstance(passed, threading.Event):
                    passed.set()
            self.closed = done
            if done:
                self.writer.close()
                return

    def failure(self) -> LogWriteFailed | None:
        """The write error, as the one line a user sees; None while the log is healthy."""
        if self.error is None:
            return None
        why = getattr(self.error, "strerror", None) or str(self.error)
        return LogWriteFailed(
            f"{self.path}: writing the session log failed ({why}); "
            f"the {self.writer.events_written} events before it are intact and readable"
        )

    def close(self) -> None:
        self._queue.put(_CLOSE)
        self._thread.join()


class Channel:
    """One publisher, many subscribers, every event encoded once."""

    def __init__(self, log: LogSink):
        self.log = log
        self._callbacks: list[Callable[[AnyEvent], None]] = []

    def subscribe(self, maxlen: int = 10_000) -> Subscription:
        sub = Subscription(maxlen)
        self.on_event(sub.offer)
        return sub

    def on_event(self, callback: Callable[[AnyEvent], None]) -> None:
        """Called in the decode thread for every event: keep it tiny (the policy's fold, a list)."""
        self._callbacks.append(callback)

    def publish(self, event: AnyEvent) -> None:
        """Raises the log's write error, so a decode stops at the first event the log lost."""
        failure = self.log.failure()
        if failure is not None:
            raise failure
        self.log.offer(encode(event), isinstance(event, RoundVerified))
        for callback in self._callbacks:
            callback(event)

    def close(self) -> None:
        self.log.close()
