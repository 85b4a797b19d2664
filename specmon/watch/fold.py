"""Reads of a server's /metrics that changed nothing are folded: an idle server's log does not grow by
the second. A read is passed on (logged, shown) where it differs from the last one passed on in anything
but its time (a counter, a gauge, its kind or error), after the folded reads its figures start from: the
read just before it (served.window from the read before is the unfolded one) and the read RECENT_S
before it (served.recent's start). An unchanged read is passed on once RECENT_S after a change (the
view's recent figures fall back to idle) and every HEARTBEAT_S; the last one at the end (flush), so the
totals span the whole run. Between two reads passed on, the counters changed at most in the last
interval: every count (a window's, recent's, the totals', runs and restarts) is the unfolded one; a span
may be longer (recent's, within RECENT_S after a fold, starts at the latest read passed on before it)."""

from __future__ import annotations

from collections import deque

import msgspec

from specmon.events.schema import ServerScraped
from specmon.metrics.served import RECENT_S

HEARTBEAT_S = 300.0  # an unchanged read is still passed on this often: the log shows the server was there


def same(before: ServerScraped, after: ServerScraped) -> bool:
    """Nothing but the time differs: the counters, gauges, kind, error, url and session are the same."""
    return msgspec.structs.replace(before, t=after.t) == after


class ReadFold:
    """Takes each read; says which reads to pass on, in order. Holds the folded reads of the last
    RECENT_S (and the one before them): at most RECENT_S / interval + 1 of them."""

    def __init__(self):
        self.last: ServerScraped | None = None  # the last read passed on
        self.changed_t = 0.0  # when the last change was read
        self.settled = True  # the first unchanged read recent_s after a change has been passed on
        self.held: deque[ServerScraped] = deque()  # folded reads since `last`

    def take(self, read: ServerScraped) -> list[ServerScraped]:
        """The reads to pass on now, in order, by the rules above."""
        if self.last is not None and same(self.last, read):
            # once RECENT_S after a change: the view's recent figures fall back to idle, as unfolded reads would
            settling = not self.settled and read.t - self.changed_t >= RECENT_S
            if not (settling or read.t - self.last.t >= HEARTBEAT_S):
                self.held.append(read)
                # a later read's recent span starts at or after this one's: reads older than its start are not needed
                while len(self.held) > 1 and self.held[1].t <= read.t - RECENT_S:
                    self.held.popleft()
                return []
            self.settled = self.settled or settling
            out = [read]
        else:
            self.changed_t, self.settled = read.t, False
            out = [*self._starts(read.t), read]
        self.held.clear()
        self.last = read
        return out

    def flush(self) -> list[ServerScraped]:
        """At the end: the latest folded read, so the totals span to it."""
        out = list(self.held)[-1:]
        self.held.clear()
        self.last = out[-1] if out else self.last
        return out

    def _starts(self, t: float) -> list[ServerScraped]:
        """The held reads figures at `t` start from: served.recent's (at t - RECENT_S) and served.window's."""
        start = next((r for r in reversed(self.held) if r.t <= t - RECENT_S), None)
        return [r for r in self.held if r is start or r is self.held[-1]]  # in order, each once
