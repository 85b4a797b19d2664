"""The proxy's own /metrics (Prometheus text): what its upstreams' replies said, per class, side and
upstream, in the names `specmon serve` uses where the meaning is the same (docs/metrics.md is the
table), plus where each class is routed, its decisions, failovers and which upstreams are up.

Counts are stored (metrics.served.RequestTotals, the sums `log info` prints from the log) and exposed
as counters at scrape time; ratios are left to PromQL. Every series a class and member can have is
there at 0 from the start (and from a reload that adds a class), so a rate sees its first count.
Upstream and routing state is read from the pools and the router when scraped, on the proxy's event
loop (the one its requests run on)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator

import httpx
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from specmon.events.schema import Decision, RequestTimed
from specmon.metrics.served import PROXY_CLOCK, SERVER_CLOCK, RequestTotals
from specmon.policy.route import BOTH, PLAIN, SPEC
from specmon.proxy.pool import Pool
from specmon.proxy.routing import Router

REPLY = ["class", "side", "upstream"]  # a reply's labels: its class, the side and the member that answered
Key = tuple[str, str, str]  # (class, side, upstream)


def upstream_label(url: str) -> str:
    """A member's URL as a label: without any user:password in it (/metrics may be open)."""
    parsed = httpx.URL(url)
    return str(parsed.copy_with(username=None, password=None)) if parsed.userinfo else url


class ProxyMetrics:
    """Fed each RequestTimed, Decision and refusal on the proxy's loop; read by GET /metrics."""

    def __init__(self, router: Router, pools: dict[str, Pool]):
        self.router, self.pools = router, pools
        self.totals: dict[Key, RequestTotals] = {}  # each (class, side, upstream)'s successful replies' sums
        self.generated: Counter[Key] = Counter()  # Σ tokens over successful replies that said
        self.statuses: Counter[tuple[str, str, str, str]] = Counter()  # (class, side, upstream, status) -> requests
        self.failovers: Counter[tuple[str, str, str]] = Counter()  # (class, routed, side) -> requests
        self.decisions: Counter[tuple[str, str]] = Counter()  # (class, applied) -> decisions
        self.refused: Counter[tuple[str]] = Counter()  # (status,) -> requests the proxy refused itself (4xx)
        self.last_move: dict[str, Decision] = {}  # class -> its last routing decision
        self.registry = CollectorRegistry()
        self.registry.register(self)  # collect(), at scrape time

    def decided(self, event: Decision) -> None:
        self.decisions[(event.prompt_class, str(event.applied).lower())] += 1
        if event.route is not None:
            self.last_move[event.prompt_class] = event

    def refusal(self, status: int) -> None:
        self.refused[(str(status),)] += 1

    def replied(self, ev: RequestTimed) -> None:
        member = upstream_label(ev.upstream_url) if ev.upstream_url else "none"  # none: no member answered
        key = (ev.prompt_class, ev.upstream, member)
        self.statuses[(*key, str(ev.status))] += 1
        if ev.routed:
            self.failovers[(ev.prompt_class, ev.routed, ev.upstream)] += 1
        if not 200 <= ev.status < 300:
            return
        self.totals[key] = self.totals.get(key, RequestTotals()) + ev
        if isinstance(ev.predicted_n, int):
            self.generated[key] += ev.predicted_n

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def keys(self) -> list[Key]:
        """Every (class, side, member) the policy and the pools allow, then any a reload left behind."""
        members = [(side, upstream_label(m.url)) for side, pool in self.pools.items() for m in pool.members]
        known = [(c.name, side, url) for c in self.router.policy.classes for side, url in members]
        return list(dict.fromkeys(known + list(self.totals)))

    def collect(self) -> Iterator[Metric]:
        """The stored sums as counters, and the routing and upstream state as gauges, at scrape time."""
        yield from self._replies()
        yield from self._requests()
        yield from self._routes()
        up = G("specmon_upstream_up", "1 while the upstream answers, 0 while it is down", labels=["side", "upstream"])
        for side, pool in self.pools.items():
            for member in pool.members:
                up.add_metric([side, upstream_label(member.url)], 0.0 if member.down else 1.0)
        yield up

    def _replies(self) -> Iterator[Metric]:
        f = {name: C(name, doc, labels=labels) for name, doc, labels in REPLY_FAMILIES}
        for key in self.keys():
            t, labels = self.totals.get(key, RequestTotals()), list(key)
            f["specmon_generation_tokens"].add_metric(labels, self.generated[key])
            f["specmon_spec_decode_num_draft_tokens"].add_metric(labels, t.draft_n)
            f["specmon_spec_decode_num_accepted_tokens"].add_metric(labels, t.draft_n_accepted)
            f["specmon_rounds"].add_metric(labels, t.steps)
            if t.stepped:
                f["specmon_spec_decode_num_drafts"].add_metric(labels, t.spec_steps)
            for position, n in enumerate(t.accepted_per_pos):
                f["specmon_spec_decode_num_accepted_tokens_per_pos"].add_metric([*labels, str(position)], n)
            for clock, tokens, ms in (
                (SERVER_CLOCK, t.predicted_n, t.predicted_ms),
                (PROXY_CLOCK, t.clocked_n, t.clocked_ms),
            ):
                f["specmon_decode_tokens"].add_metric([*labels, clock], tokens)
                f["specmon_decode_seconds"].add_metric([*labels, clock], ms / 1e3)
        yield from f.values()

    def _requests(self) -> Iterator[Metric]:
        names = [c.name for c in self.router.policy.classes]
        moves = [(SPEC, PLAIN), (PLAIN, SPEC)] if PLAIN in self.pools else []
        applied = str(self.router.enforced).lower()
        zeros = {  # each counter's series from the start, at 0 until counted
            "statuses": [(*key, "200") for key in self.keys()],  # every (class, side, member) answered
            "refused": sorted(self.refused),
            "failovers": [(n, a, b) for n in names for a, b in moves],
            "decisions": [(n, applied) for n in names],
        }
        for name, doc, labels, counted in REQUEST_FAMILIES:
            counter, counts = C(name, doc, labels=labels), getattr(self, counted)
            for key in dict.fromkeys([*zeros[counted], *counts]):
                counter.add_metric(list(key), counts[key])
            yield counter

    def _routes(self) -> Iterator[Metric]:
        router = self.router
        side = G(
            "specmon_route_side",
            "1 for the side the class is routed to now (both: alternating, learning)",
            labels=["class", "side"],
        )
        share = G("specmon_route_plain_share", "The share of the class's requests sent plain now", labels=["class"])
        for name in (c.name for c in router.policy.classes):
            now = router.route_of(name)
            for s in (BOTH, SPEC, PLAIN):
                side.add_metric([name, s], 1.0 if s == now else 0.0)
            share.add_metric([name], router.share(name))
        yield from (side, share)
        # the last move's ratio and interval, while the class is where that move put it (a reload that
        # started it again, or dropped it, leaves none)
        current = {
            name: d.route
            for name, d in self.last_move.items()
            if name in router.classes and router.classes[name].side == d.route.side_to
        }
        for suffix, field, doc in ESTIMATES:
            gauge = G(f"specmon_route_spec_over_plain{suffix}", doc, labels=["class"])
            for name, choice in current.items():
                value = getattr(choice, field)
                gauge.add_metric([name], math.nan if value is None else value)
            yield gauge


C, G = CounterMetricFamily, GaugeMetricFamily
REPLY_FAMILIES = (  # (name, doc, labels) of each counter of replies
    ("specmon_generation_tokens", "Tokens generated, over the successful replies that said", REPLY),
    ("specmon_spec_decode_num_draft_tokens", "Draft tokens proposed (the upstream's count)", REPLY),
    ("specmon_spec_decode_num_accepted_tokens", "Draft tokens the upstream's target accepted", REPLY),
    ("specmon_spec_decode_num_drafts", "Verification steps, where the upstream counts them (vLLM)", REPLY),
    ("specmon_rounds", "Target steps of the replies that reported their drafts", REPLY),
    (
        "specmon_spec_decode_num_accepted_tokens_per_pos",
        "Steps whose accepted prefix reached past this 0-based position (vLLM)",
        [*REPLY, "position"],
    ),
    ("specmon_decode_tokens", "Tokens timed on the clock (goodput's numerator)", [*REPLY, "clock"]),
    (
        "specmon_decode_seconds",
        "Decode time on the clock: server, the server's own; proxy, a stream's first to last byte "
        "(its tokens after the first) or a whole reply's arrival to last byte",
        [*REPLY, "clock"],
    ),
)
REQUEST_FAMILIES = (  # (name, doc, labels, the Counter of ProxyMetrics that counts it) of each counter of requests
    (
        "specmon_proxy_requests",
        "Requests proxied, by status: the upstream's HTTP status; 0 no member answered (the client got a 502); "
        "499 the client left; 502 the reply broke off; 504 the upstream went silent",
        [*REPLY, "status"],
        "statuses",
    ),
    ("specmon_proxy_requests_refused", "Requests the proxy refused itself, by HTTP status", ["status"], "refused"),
    (
        "specmon_failovers",
        "Requests answered by the other side: none of the routed side's answered",
        ["class", "routed", "side"],
        "failovers",
    ),
    ("specmon_policy_decisions", "Routing decisions (applied = false: advise mode)", ["class", "applied"], "decisions"),
)
ESTIMATES = (  # the last move's spec/plain ratio and its interval: (name's suffix, RouteChoice's field, doc)
    ("", "ratio", "spec/plain goodput over the requests the class's last move cited"),
    ("_low", "low", "the low bound of its 95% interval (NaN: too few requests for one)"),
    ("_high", "high", "the high bound of its 95% interval (NaN: too few requests for one)"),
)
