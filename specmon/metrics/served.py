"""Figures of traffic specmon did not decode itself: a watched server's counters (ServerScraped) and
the responses a proxy passed on (RequestTimed). Counts are what the events hold; every ratio here is
rates' over sums, so a watch says "acceptance" in exactly the sense a specmon session does.

A window is the difference of two scrapes of one server: counters are cumulative, so a counter that
went down means the server restarted, and no window spans a restart (the watch starts again from the
first scrape after it)."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import zip_longest

import msgspec

from specmon.events.schema import RequestTimed, ServerScraped
from specmon.metrics import rates
from specmon.metrics.format import MISSING, fmt

COUNTERS = ("drafts", "draft_tokens", "accepted", "generation_tokens")
RECENT_S = 60.0  # the "recent" figures' span: long enough to hold a few whole requests
NO_METRICS = "publishes no /metrics"  # the proxy's line for an upstream without one: a fact, not a fault
SERVED_BACKENDS = ("watch", "proxy")  # SessionStarted.backend of sessions that decode nothing and read a server


@dataclass(frozen=True)
class Window:
    """What a server did between two of its scrapes: counter deltas, over `seconds`."""

    start: float  # wall clock of the earlier scrape
    seconds: float
    drafts: int
    draft_tokens: int
    accepted: int
    accepted_per_pos: tuple[int, ...]
    generation_tokens: int | None

    @property
    def acceptance(self) -> float | None:
        """Σ accepted / Σ drafted (draft tokens), as RoundVerified's rate."""
        return rates.acceptance_rate(self.accepted, self.draft_tokens)

    @property
    def accepted_per_draft(self) -> float | None:
        """Mean accepted length of a draft (accepted tokens / drafts)."""
        return rates.ratio(self.accepted, self.drafts)

    def position_rates(self) -> list[float | None]:
        """Acceptance at draft position i: drafts whose accepted prefix reached past i / drafts."""
        return [rates.ratio(n, self.drafts) for n in self.accepted_per_pos]

    @property
    def drafts_per_s(self) -> float | None:
        return rates.ratio(self.drafts, self.seconds)

    @property
    def tokens_per_s(self) -> float | None:
        return None if self.generation_tokens is None else rates.ratio(self.generation_tokens, self.seconds)


ZERO_RUN = 3  # trailing positions at 0 (or N/A) said as one cell from this many (fewer take no more room written out)


def position_cells(rates: list[float | None]) -> list[tuple[str, float | None, int]]:
    """(position, rate, positions it stands for): each position's own, but a trailing run of positions no
    draft got past (llama-server counts one per --draft-max) is one cell, "4-47" at 0; so is a run at N/A
    (a window without drafts: "0-47" at N/A)."""
    last = rates[-1] if rates else 0
    reached = len(rates)
    while reached and rates[reached - 1] == last and last in (0, None):
        reached -= 1
    if len(rates) - reached < ZERO_RUN:
        reached = len(rates)
    cells = [(str(i), rate, 1) for i, rate in enumerate(rates[:reached])]
    if reached < len(rates):
        cells.append((f"{reached}-{len(rates) - 1}", last, len(rates) - reached))
    return cells


def position_cell_text(position: str, rate: float | None, positions: int) -> str:
    """A position_cells cell as written: a position's rate alone (its place says which), a run's "4-47: 0.00"."""
    return fmt(rate) if positions == 1 else f"{position}: {fmt(rate)}"


def absent(scrape: ServerScraped) -> bool:
    """A failed read that found no server there (nothing listening, or a model still loading): whatever
    answers next started again, even where its counters have already passed the old ones."""
    return scrape.error.startswith("down: connection refused") or "not ready" in scrape.error


def restarted(before: ServerScraped, after: ServerScraped, gone: bool = False) -> bool:
    """The server started again between two good reads: it was `gone` between them, or a counter went down."""
    pairs = [(getattr(before, name), getattr(after, name)) for name in COUNTERS]
    pairs += list(zip(before.accepted_per_pos, after.accepted_per_pos))
    fewer = len(after.accepted_per_pos) < len(before.accepted_per_pos)
    return gone or fewer or any(b is not None and a is not None and a < b for b, a in pairs)


def window(before: ServerScraped, after: ServerScraped) -> Window | None:
    """The counters' deltas from one good scrape to a later one; None across a restart or without draft counters."""
    if before.error or after.error or after.drafts is None or before.drafts is None or restarted(before, after):
        return None
    generated = (after.generation_tokens, before.generation_tokens)
    return Window(
        start=before.t,
        seconds=after.t - before.t,
        drafts=after.drafts - before.drafts,
        draft_tokens=(after.draft_tokens or 0) - (before.draft_tokens or 0),
        accepted=(after.accepted or 0) - (before.accepted or 0),
        accepted_per_pos=_added(after.accepted_per_pos, [-n for n in before.accepted_per_pos]),
        generation_tokens=None if None in generated else generated[0] - generated[1],
    )


def runs(scrapes: Sequence[ServerScraped]) -> list[list[ServerScraped]]:
    """The good scrapes split where the server restarted: each run's counters only grow."""
    out: list[list[ServerScraped]] = []
    gone = False
    for scrape in scrapes:
        if scrape.error or scrape.drafts is None:
            gone = gone or absent(scrape)
            continue
        if out and not restarted(out[-1][-1], scrape, gone):
            out[-1].append(scrape)
        else:
            out.append([scrape])
        gone = False
    return out


def total(scrapes: Sequence[ServerScraped]) -> Window | None:
    """Everything the watch saw the server do, summed run by run (total_of_runs)."""
    return total_of_runs(runs(scrapes))


def total_of_runs(found: Sequence[Sequence[ServerScraped]]) -> Window | None:
    """The first run from its first read to its last (what came before the watch is not its to count);
    each later run from zero, as the server started again, to its last read."""
    spans = [window(run[0] if i == 0 else _zero(run[0]), run[-1]) for i, run in enumerate(found)]
    spans = [w for w in spans if w is not None and (w.seconds > 0 or w.drafts)]
    if not spans:
        return None
    gens = [w.generation_tokens for w in spans]
    return Window(
        start=spans[0].start,
        seconds=sum(w.seconds for w in spans),
        drafts=sum(w.drafts for w in spans),
        draft_tokens=sum(w.draft_tokens for w in spans),
        accepted=sum(w.accepted for w in spans),
        accepted_per_pos=functools.reduce(_added, (w.accepted_per_pos for w in spans), ()),
        generation_tokens=None if None in gens else sum(gens),
    )


def _zero(first: ServerScraped) -> ServerScraped:
    """A restarted server's counters before anything it did: zero, at its first read's time."""
    none_or_zero = {name: None if getattr(first, name) is None else 0 for name in COUNTERS}
    return msgspec.structs.replace(first, accepted_per_pos=[], **none_or_zero)


def requests_cell(requests: int, timed: int, reported: int) -> str:
    """The requests, and how many were timed and reported where not all were: log info's and the report's words."""
    partial = [f"{timed} timed"] if timed < requests and timed else []
    partial += [f"{reported} reported"] if 0 < reported < requests else []
    return f"{requests} ({', '.join(partial)})" if partial else str(requests)


SERVER_CLOCK, PROXY_CLOCK = "server", "proxy"  # which clock a reply's tokens were timed on
CLOCK_WORDS = {SERVER_CLOCK: "the servers' own decode time", PROXY_CLOCK: "the proxy's clock"}
CLOCKED = "*"  # marks a tok/s on the proxy's clock


@dataclass(frozen=True)
class Timing:
    """A reply's generated tokens over the ms they took, on one clock."""

    clock: str  # SERVER_CLOCK or PROXY_CLOCK
    tokens: int
    ms: float


def timing(ev: RequestTimed, clock: str | None = None) -> Timing | None:
    """Whether a reply is timed, and on which clock: the one definition the routing, the table, the view
    and the advice use. A successful reply that said how many tokens it generated (at least one) is timed
    on the server's clock where it gave the server's own decode ms (positive, finite); else on the proxy's,
    which every side shares: a stream's tokens after the first over its first to last byte (the first byte
    brought the first token, after the prefill); a reply sent whole, its tokens over the request's arrival
    to the last byte (its prefill inside: nothing splits it). `clock` asks for that clock alone. None: not
    timed (failed, no tokens, no time > 0)."""
    if not 200 <= ev.status < 300 or not isinstance(ev.predicted_n, int) or ev.predicted_n < 1:
        return None
    if clock != PROXY_CLOCK and _positive(ev.predicted_ms):
        return Timing(SERVER_CLOCK, ev.predicted_n, ev.predicted_ms)
    if clock == SERVER_CLOCK or ev.total_ms is None:
        return None
    if ev.stream:
        tokens, ms = ev.predicted_n - 1, None if ev.first_byte_ms is None else ev.total_ms - ev.first_byte_ms
    else:
        tokens, ms = ev.predicted_n, ev.total_ms
    return Timing(PROXY_CLOCK, tokens, ms) if tokens >= 1 and _positive(ms) else None


def _positive(ms: float | None) -> bool:
    return isinstance(ms, (int, float)) and math.isfinite(ms) and ms > 0


def judged_on(*sides: RequestTotals) -> str:
    """The clock a class's sides are compared on: the servers' own while every timed reply gave it, the
    proxy's from the first that did not (one clock both sides share, never one clock each)."""
    return PROXY_CLOCK if any(t.proxy_only for t in sides) else SERVER_CLOCK


def tok_per_s_text(speed: float | None, clock: str, missing: str = MISSING) -> str:
    """A decode tok/s on `clock` as every table, line and pane writes it: one decimal, CLOCKED on the proxy's."""
    return missing if speed is None else f"{speed:.1f}{CLOCKED if clock == PROXY_CLOCK else ''}"


@dataclass(frozen=True)
class RequestTotals:
    """Σ over one class's successful requests to one upstream of what their replies said (RequestTimed,
    any family). Each sum is over the replies that gave its figure: one not given is never taken as 0."""

    requests: int = 0
    timed: int = 0  # replies timed on the server's clock (timing): generated tokens and its own decode ms
    predicted_n: int = 0  # Σ generated tokens over the timed replies
    predicted_ms: float = 0.0  # Σ the server's decode ms over them
    draft_n: int = 0  # Σ draft tokens proposed, over the reported replies
    draft_n_accepted: int = 0
    reported: int = 0  # replies that gave their drafted and accepted counts
    steps: int = 0  # Σ the target's steps over the reported replies
    stepped: int = 0  # reported replies that also counted their verification steps (vLLM)
    spec_steps: int = 0  # Σ those steps
    accepted_per_pos: tuple[int, ...] = ()  # Σ steps past position i, over replies with a histogram (vLLM)
    pos_steps: int = 0  # Σ the steps of those replies: the positions' denominator
    clocked_n: int = 0  # Σ tokens of every reply timed on the proxy's clock (timing)
    clocked_ms: float = 0.0  # Σ their ms on the proxy's clock
    family: str = ""  # the reply shape last seen ("llama-server", "vllm", "tabbyapi")
    clocked: int = 0  # replies timed on the proxy's clock (with or without the server's decode time)
    proxy_only: int = 0  # of them, replies that gave no decode time of the server's: timed on the proxy's alone

    def __add__(self, ev: RequestTimed) -> RequestTotals:
        server, proxy = timing(ev, SERVER_CLOCK), timing(ev, PROXY_CLOCK)
        added = {"requests": 1}  # what the reply adds to each sum whose figure it gives
        if server is not None:
            added |= {"timed": 1, "predicted_n": server.tokens, "predicted_ms": server.ms}
        if proxy is not None:
            added |= {"clocked": 1, "clocked_n": proxy.tokens, "clocked_ms": proxy.ms, "proxy_only": server is None}
        positions = ()
        if ev.draft_n is not None and ev.draft_n_accepted is not None:
            added |= {"reported": 1, "draft_n": ev.draft_n, "draft_n_accepted": ev.draft_n_accepted}
            # the target's steps: the server's count where it gave one (vLLM), else one per token the target
            # emitted of its own beside the drafts it accepted (generated - accepted)
            added["steps"] = max(0, (ev.predicted_n or 0) - ev.draft_n_accepted)
            if ev.spec_steps is not None:
                added |= {"stepped": 1, "spec_steps": ev.spec_steps, "steps": ev.spec_steps}
            if ev.accepted_per_pos and ev.spec_steps is not None:
                added["pos_steps"] = ev.spec_steps
                positions = ev.accepted_per_pos
        sums = {name: getattr(self, name) + n for name, n in added.items()}
        positions = _added(self.accepted_per_pos, positions)
        return replace(self, **sums, accepted_per_pos=positions, family=ev.family or self.family)

    @property
    def acceptance(self) -> float | None:
        """Σ accepted / Σ drafted over the reported replies; None where none reported (never 0)."""
        return rates.acceptance_rate(self.draft_n_accepted, self.draft_n)

    @property
    def counted_steps(self) -> bool:
        """Every reported reply counted its steps (vLLM), so `steps` is the server's count alone."""
        return self.reported > 0 and self.stepped == self.reported

    @property
    def tokens_per_step(self) -> float | None:
        """Tokens a target step emitted (1.0: speculation added nothing): (accepted + steps) / steps, over
        the reported replies (vLLM's mean acceptance length where it counted its steps); None where no
        reply reported its drafts, or none took a step."""
        return rates.ratio(self.draft_n_accepted + self.steps, self.steps) if self.reported else None

    def position_rates(self) -> list[float | None]:
        """Acceptance at draft position i: steps whose accepted prefix reached past i / steps (vLLM's histograms)."""
        return [rates.ratio(n, self.pos_steps) for n in self.accepted_per_pos]

    @property
    def tok_per_s(self) -> float | None:
        """Decode tok/s over the upstream's own decode time: each request's speed, not the server's throughput."""
        goodput = rates.goodput(self.predicted_n, self.predicted_ms)
        return None if goodput is None else goodput * 1e3

    def tok_per_s_on(self, clock: str) -> float | None:
        """Tok/s on `clock`: the server's decode time, or the proxy's (judged_on says which a class takes)."""
        return self.tok_per_s if clock == SERVER_CLOCK else self.clocked_tok_per_s

    @property
    def clocked_tok_per_s(self) -> float | None:
        """Tok/s on the proxy's clock (timing): queueing and the network are in it, so it is never the server's."""
        speed = rates.ratio(self.clocked_n, self.clocked_ms)
        return None if speed is None else speed * 1e3


def _added(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """Two per-position sums, the shorter padded with zeros (drafts of different lengths)."""
    return tuple(x + y for x, y in zip_longest(a, b, fillvalue=0))


def add_request(totals: dict[tuple[str, str], RequestTotals], ev: RequestTimed) -> None:
    """Count one request into (class, upstream) -> its successful requests' sums (added as they come)."""
    if 200 <= ev.status < 300:
        key = (ev.prompt_class, ev.upstream)
        totals[key] = totals.get(key, RequestTotals()) + ev


def recent(scrapes: Sequence[ServerScraped], seconds: float) -> Window | None:
    """The total over the last `seconds` before the latest read (restarts split as in total): from the
    latest read at or before their start, so a span read whole is `seconds` long, not one interval short;
    from the first read where reading began later (its Window's seconds say how long it really is)."""
    if not scrapes:
        return None
    since = scrapes[-1].t - seconds
    first = next((i for i in range(len(scrapes) - 1, -1, -1) if scrapes[i].t <= since), 0)
    return total(scrapes[first:])
