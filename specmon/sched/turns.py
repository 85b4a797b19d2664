"""How every interleaved comparison orders its arms: per prompt, each arm takes every place in turn
(`rotated`: run, sweep, bench policy, bench engines, bench serve), and where the engine can be
copied, one prompt's decodes take turns round by round, each on its own copy of the KV cache
(`bench policy`, `sweep`), so a change in the machine's speed (seconds long on a shared host) falls
on all of them alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Generator, Sequence, TypeVar

from specmon.engine.drafters import Drafter
from specmon.engine.driver import SessionDriver
from specmon.events.schema import AnyEvent

T = TypeVar("T")


def rotated(arms: Sequence[T], index: int) -> list[T]:
    """The arms in the order prompt `index` runs them: each takes every place in turn."""
    shift = index % len(arms) if arms else 0
    return [*arms[shift:], *arms[:shift]]


@dataclass
class Lane:
    """One decode's own KV cache and drafter; its events wait in `held` until the prompt's
    decodes are all done, so the log keeps each decode's events together (a crash loses only the
    prompt in flight)."""

    driver: SessionDriver
    drafter: Drafter
    held: list[AnyEvent] = field(default_factory=list)

    def flush(self, emit: Callable[[AnyEvent], None]) -> None:
        for event in self.held:
            emit(event)
        self.held.clear()


def lanes(driver: SessionDriver, drafters: Sequence[Drafter]) -> list[Lane] | None:
    """A lane per drafter given (each forked), where the target and every drafter can be copied; else None."""
    if any(getattr(d, "fork", None) is None for d in drafters):
        return None
    made = []
    for drafter in drafters:
        held: list[AnyEvent] = []
        twin = driver.fork(held.append)
        if twin is None:
            return None
        made.append(Lane(twin, drafter.fork(), held))
    return made


def take_turns(decodes: Sequence[Generator[int, None, object]]) -> list[object]:
    """Step the decodes one round at a time, always the one with the fewest tokens so far; returns what each
    decode returned."""
    progress = [0] * len(decodes)
    results: list[object] = [None] * len(decodes)
    live = set(range(len(decodes)))
    while live:
        turn = min(live, key=lambda i: (progress[i], i))
        try:
            progress[turn] = next(decodes[turn])
        except StopIteration as done:
            results[turn] = done.value
            live.discard(turn)
    return results
