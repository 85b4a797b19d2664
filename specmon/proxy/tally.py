"""A proxy session's end table, fed one event at a time and never holding every request: running sums
per (class, side) (metrics.served.RequestTotals), the requests left out of them by status, each
upstream's silence (metrics.unreported.Silence), and, for the advice's bootstrap, the last WINDOW timed
requests per (class, side). `specmon proxy`'s end and `log info` both read one (proxy.tables), so the
table of a live session and of its log are one path."""

from __future__ import annotations

from collections import Counter, deque

from specmon.events.schema import RequestTimed, ServerScraped
from specmon.metrics.served import RequestTotals, add_request, judged_on, timing
from specmon.metrics.unreported import Silence
from specmon.policy.route import PLAIN, SPEC

# The advice's requests per side: within metrics.interval.CACHED_PROMPTS for both sides together (the
# bootstrap draws from cached resamples), and at a request's usual spread the interval is a few percent
# wide by then; older requests tell of traffic that may have changed, and a proxy runs for weeks.
WINDOW = 128


class Tally:
    """Its memory grows with the policy's classes and the command line's upstreams, never with the requests."""

    def __init__(self, plain_given: bool | None = None):
        self.plain_given = plain_given  # None: inferred from a request that went plain
        self.totals: dict[tuple[str, str], RequestTotals] = {}  # (class, side) -> its successful replies' sums
        self.outcomes: Counter[int] = Counter()  # status -> requests with no successful reply
        self.recent: dict[tuple[str, str], deque[RequestTimed]] = {}  # (class, side) -> its last WINDOW timed requests
        self.classes: dict[str, None] = {}  # in order of first appearance
        self.silence = Silence()
        self.windowed = False  # a side of a class had more timed requests than the window holds

    def add(self, ev) -> None:
        """Take one event: a request's reply, or a read of an upstream's /metrics; others are not its."""
        if isinstance(ev, ServerScraped):
            self.silence.read(ev)
        if not isinstance(ev, RequestTimed):
            return
        self.classes.setdefault(ev.prompt_class, None)
        self.silence.reply(ev)
        if ev.upstream == PLAIN and self.plain_given is None:
            self.plain_given = True
        if not 200 <= ev.status < 300:
            self.outcomes[ev.status] += 1
            return
        add_request(self.totals, ev)
        if timing(ev) is not None:
            key = (ev.prompt_class, ev.upstream)
            kept = self.recent.setdefault(key, deque(maxlen=WINDOW))
            self.windowed = self.windowed or len(kept) == WINDOW
            kept.append(ev)

    def side(self, name: str, side: str) -> RequestTotals:
        return self.totals.get((name, side), RequestTotals())

    def clock(self, name: str) -> str:
        """The clock the class is judged on (metrics.served.judged_on), from all its replies so far."""
        return judged_on(self.side(name, SPEC), self.side(name, PLAIN))
