"""Replay a session log at 1×, 10× or as fast as possible, step by step, or jump ahead.

Pull-based: the TUI's timer asks for the events due now. Nothing is preloaded: the log is
read lazily, so a million-round log opens at once and memory stays within the panes' windows.
Jumping back re-reads from the start (the panes are folds over events, so that is exact)."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

from specmon.errors import SpecmonError
from specmon.events.log import follow_log, read_log
from specmon.events.schema import AnyEvent, Decision, PromptStarted, RoundVerified

SPEEDS = (1.0, 10.0, 0.0)  # 0 means as fast as possible
MAX_BATCH = 20_000  # events handed to the app per tick, so the screen keeps refreshing


class ReplayFeed:
    """Looks like a live Feed to the app: drain(), done, skipped, error, title."""

    def __init__(self, path: Path, speed: float = 0.0, follow: bool = False):
        self.path = Path(path)
        self.follow = follow
        self.title = f"replay {self.path.name}"
        self.speed = speed
        self.playing = True
        self.error: str | None = None
        self.done = threading.Event()
        self.skipped = 0
        self.restarted = False  # the app must reset its state (after a jump back)
        self._open()

    def _open(self) -> None:
        self._events: Iterator[AnyEvent] = follow_log(self.path) if self.follow else read_log(self.path)
        self._peeked: AnyEvent | None = None
        self._clock: tuple[float, float] | None = None  # (wall time, log time) when playback last synced
        self.position = 0  # events handed out so far
        self.done.clear()

    # -- what the app's timer calls -------------------------------------------------------------
    def drain(self) -> list[AnyEvent]:
        if not self.playing:
            return []
        if self.speed == 0.0:
            return self._take(lambda ev: True, MAX_BATCH)
        now = time.monotonic()
        first = self._peek()
        if first is None:
            return []
        if self._clock is None:
            self._clock = (now, first.t)
        due = self._clock[1] + (now - self._clock[0]) * self.speed
        return self._take(lambda ev: ev.t <= due, MAX_BATCH)

    # -- controls ---------------------------------------------------------------------------
    def toggle(self) -> None:
        self.playing = not self.playing
        self._clock = None

    def cycle_speed(self) -> None:
        self.speed = SPEEDS[(SPEEDS.index(self.speed) + 1) % len(SPEEDS)] if self.speed in SPEEDS else 0.0
        self._clock = None

    def step(self, until: type) -> list[AnyEvent]:
        """Everything up to and including the next event of type `until`."""
        self.playing = False
        return self._take(lambda ev: True, MAX_BATCH, stop_after=lambda ev: isinstance(ev, until))

    def jump(self, target: str) -> list[AnyEvent]:
        """Events up to a round id (`r123`), a prompt id (`p:chat-2`) or a decision (`d4`), as jump_to finds them."""
        return self.jump_to(_target(target), f"jump target {target!r} is not in {self.path.name}")

    def jump_to(self, match: Callable[[AnyEvent], bool], missing: str) -> list[AnyEvent]:
        """Events up to the first that `match` holds for. The log is searched first, with a reader of its own: where
        none is, SpecmonError(missing), and the position, the play state and what was handed out stay as they were."""
        index = None
        with contextlib.suppress(SpecmonError):  # damage ends the search
            index = next((i for i, ev in enumerate(read_log(self.path)) if match(ev)), None)
        if index is None:
            raise SpecmonError(missing)
        self.playing = False
        if index == self.position - 1:  # already there
            return []
        if index < self.position:  # behind us: start again from the beginning
            self._open()
            self.restarted = True
        return self._take(lambda ev: True, index + 1 - self.position)

    # -- reading ----------------------------------------------------------------------------
    def _peek(self) -> AnyEvent | None:
        if self._peeked is None and not self.done.is_set():
            try:
                self._peeked = next(self._events)
            except StopIteration:
                self.done.set()
            except SpecmonError as exc:  # damage: everything before it has been shown
                self.error = str(exc)
                self.done.set()
        return self._peeked

    def _take(
        self, due: Callable[[AnyEvent], bool], limit: int, stop_after: Callable[[AnyEvent], bool] | None = None
    ) -> list[AnyEvent]:
        batch: list[AnyEvent] = []
        while len(batch) < limit:
            ev = self._peek()
            if ev is None or not due(ev):
                break
            self._peeked = None
            batch.append(ev)
            if stop_after is not None and stop_after(ev):
                break
        self.position += len(batch)
        return batch


def _target(text: str) -> Callable[[AnyEvent], bool]:
    if text.startswith("p:"):
        return lambda ev: isinstance(ev, PromptStarted) and ev.prompt_id == text[2:]
    numbered = {"r": (RoundVerified, "round_id"), "d": (Decision, "decision_id")}  # jump targets by their id
    if text[:1] not in numbered or not text[1:].isdigit():
        raise SpecmonError(f"jump target {text!r}: use r<round id>, p:<prompt id> or d<decision id>")
    (kind, field), number = numbered[text[0]], int(text[1:])
    return lambda ev: isinstance(ev, kind) and getattr(ev, field) == number
