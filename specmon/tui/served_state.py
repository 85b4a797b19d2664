"""What the served view knows, folded from its events; its windows, totals and sums are specmon.metrics.served's."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from specmon.events.schema import Decision, RequestTimed, ServerScraped, SessionFinished, SessionStarted
from specmon.metrics import served, unreported
from specmon.metrics.served import RECENT_S

KEPT_WINDOWS = 240  # windows the sparkline can draw
KEPT_READS = 100_000  # a bound only: reads are kept for RECENT_S, whatever the interval
KEPT_CHANGES = 20  # down / back / restarted lines kept for the server pane


@dataclass
class ServedState:
    started: SessionStarted | None = None
    finished: SessionFinished | None = None
    last: ServerScraped | None = None  # the latest read, good or failed
    last_good: ServerScraped | None = None
    up_since: float | None = None  # our first good read since a failure or restart: llama-server gives no start
    reads: deque = field(default_factory=lambda: deque(maxlen=KEPT_READS))  # RECENT_S of reads and the one before
    windows: deque = field(default_factory=lambda: deque(maxlen=KEPT_WINDOWS))  # served.Window or None (restart)
    runs: list = field(default_factory=list)  # each run's first and latest good read (served.total's input)
    changes: deque = field(default_factory=lambda: deque(maxlen=KEPT_CHANGES))  # (t, what) of state changes
    failed_reads: int = 0
    gone: bool = False  # a read since the last good one found no server: the next good one is a restart
    requests: dict = field(default_factory=dict)  # (class, upstream) -> served.RequestTotals
    requests_seen: int = 0  # RequestTimed events, failed ones included
    silence: unreported.Silence = field(default_factory=unreported.Silence)  # what explains an n/r row
    routes: dict = field(default_factory=dict)  # class -> the latest routing Decision (a proxy with a plain side)

    def apply(self, batch) -> None:
        for ev in batch:
            if isinstance(ev, ServerScraped):
                self._read(ev)
                self.silence.read(ev)
            elif isinstance(ev, RequestTimed):
                self.requests_seen += 1
                served.add_request(self.requests, ev)
                self.silence.reply(ev)
            elif isinstance(ev, Decision) and ev.route is not None:
                self.routes[ev.prompt_class] = ev
            elif isinstance(ev, SessionStarted):
                self.started = ev
            elif isinstance(ev, SessionFinished):
                self.finished = ev

    def clock(self, name: str) -> str:
        """The clock class `name` is judged on (served.judged_on over both its sides' replies)."""
        blank = served.RequestTotals()
        return served.judged_on(self.requests.get((name, "spec"), blank), self.requests.get((name, "plain"), blank))

    def _read(self, now: ServerScraped) -> None:
        before, good = self.last, self.last_good
        self.last = now
        self.reads.append(now)  # failed ones too: a read that found no server splits the recent runs
        while len(self.reads) > 1 and self.reads[1].t <= now.t - RECENT_S:  # served.recent starts at reads[0]
            self.reads.popleft()
        if now.error or now.drafts is None:
            self.failed_reads += 1
            self.gone = self.gone or served.absent(now)
            if before is None or before.error != now.error:
                self.changes.append((now.t, "down" if now.error.startswith("down") else "no counters", now.error))
            self.up_since = None
            return
        reset = good is not None and served.restarted(good, now, self.gone)
        gone, self.gone = self.gone, False
        if reset:
            self.changes.append((now.t, "restarted", "started again: windows start again"))
        elif before is not None and before.error:
            self.changes.append((now.t, "back", ""))
        if self.up_since is None or reset:
            self.up_since = now.t
        self.windows.append(served.window(good, now) if good is not None and not gone else None)
        if self.runs and not reset:
            self.runs[-1][1:] = [now]
        else:
            self.runs.append([now])
        self.last_good = now

    # -- figures (each a served.Window over a stated span) --------------------------------------
    def recent(self) -> served.Window | None:
        return served.recent(list(self.reads), RECENT_S)

    def last_window(self) -> served.Window | None:
        return self.windows[-1] if self.windows else None

    def total(self) -> served.Window | None:
        return served.total_of_runs(self.runs)

    @property
    def restarts(self) -> int:
        return max(len(self.runs) - 1, 0)
