"""The proxy's own /metrics (Prometheus text): what its upstreams' replies said, per class, side and
upstream, in the names `specmon serve` uses where the meaning is the same (docs/metrics.md is the
table), plus where each class is routed, its decisions, failovers and which upstreams are up.

Counts are stored (metrics.served.RequestTotals, the sums `log info` prints from the log) and exposed
as counters at scrape time; ratios are left to PromQL. Upstream and routing state is read from the
pools and the router when scraped, on the proxy's event loop, so it is never stale."""

from __future__ import annotations

import math
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from specmon.events.schema import Decision, RequestTimed
from specmon.metrics.served import PROXY_CLOCK, SERVER_CLOCK, RequestTotals
from specmon.policy.route import BOTH, PLAIN, SPEC
from specmon.proxy.pool import Pool
from specmon.proxy.routing import Router

REPLY = ["class", "side", "upstream"]  # a reply's labels: its class, the side and the member that answered
NO_UPSTREAM = "none"  # the upstream label of a request no member answered
SIDES = (BOTH, SPEC, PLAIN)


class ProxyMetrics:
    """Fed each request's RequestTimed and each Decision on the proxy's loop; read by GET /metrics."""

    def __init__(self, router: Router, pools: dict[str, Pool]):
        self.router, self.pools = router, pools
        self.registry = r = CollectorRegistry()
        self.totals: dict[tuple[str, str, str], RequestTotals] = {}  # (class, side, upstream) -> its replies' sums
        self.steps: dict[tuple[str, str, str], int] = {}  # Σ target steps over the replies that reported drafts
        self.generated: dict[tuple[str, str, str], int] = {}  # Σ tokens over successful replies that said
        self.last_choice: dict[str, Decision] = {}  # class -> its last routing decision
        self.requests = Counter(
            "specmon_proxy_requests",
            "Requests proxied, by the HTTP status the client got",
            [*REPLY, "status"],
            registry=r,
        )
        self.failovers = Counter(
            "specmon_failovers",
            "Requests answered by the other side: none of the routed side's upstreams answered",
            ["class", "routed", "side"],
            registry=r,
        )
        self.decisions = Counter(
            "specmon_policy_decisions",
            "Routing decisions (applied = false: advise mode)",
            ["class", "applied"],
            registry=r,
        )
        r.register(_Collector(self))

    def observe(self, event) -> None:
        if isinstance(event, RequestTimed):
            self._request(event)
        elif isinstance(event, Decision):
            self.decisions.labels(event.prompt_class, str(event.applied).lower()).inc()
            if event.route is not None:
                self.last_choice[event.prompt_class] = event

    def _request(self, ev: RequestTimed) -> None:
        key = (ev.prompt_class, ev.upstream, ev.upstream_url or NO_UPSTREAM)
        self.requests.labels(*key, str(ev.status)).inc()
        if ev.routed:
            self.failovers.labels(ev.prompt_class, ev.routed, ev.upstream).inc()
        if not 200 <= ev.status < 300:
            return
        self.totals[key] = self.totals.get(key, RequestTotals()) + ev
        if isinstance(ev.predicted_n, int):
            self.generated[key] = self.generated.get(key, 0) + ev.predicted_n
        if ev.draft_n is not None and ev.draft_n_accepted is not None:
            # each target step emits one token of its own beside the drafts it accepted (vLLM counts them)
            own = ev.spec_steps if ev.spec_steps is not None else (ev.predicted_n or 0) - ev.draft_n_accepted
            self.steps[key] = self.steps.get(key, 0) + max(0, own)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _Collector:
    """The stored sums as counters, and the routing and upstream state as gauges, at scrape time."""

    def __init__(self, metrics: ProxyMetrics):
        self.m = metrics

    def collect(self) -> Iterator[Metric]:
        yield from self._replies()
        yield from self._routes()
        up = GaugeMetricFamily(
            "specmon_upstream_up", "1 while the upstream answers, 0 while it is down", labels=["side", "upstream"]
        )
        for side, pool in self.m.pools.items():
            for member in pool.members:
                up.add_metric([side, member.url], 0.0 if member.down else 1.0)
        yield up

    def _replies(self) -> Iterator[Metric]:
        m = self.m
        c = {
            name: CounterMetricFamily(name, doc, labels=labels)
            for name, doc, labels in (
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
                (
                    "specmon_decode_tokens",
                    "Tokens timed on the clock, over the replies timed on it (goodput's numerator)",
                    [*REPLY, "clock"],
                ),
                (
                    "specmon_decode_seconds",
                    "Decode time on the clock: the server's own, or the proxy's first to last byte",
                    [*REPLY, "clock"],
                ),
            )
        }
        for key, t in m.totals.items():
            labels = list(key)
            c["specmon_generation_tokens"].add_metric(labels, m.generated.get(key, 0))
            if t.reported:
                c["specmon_spec_decode_num_draft_tokens"].add_metric(labels, t.draft_n)
                c["specmon_spec_decode_num_accepted_tokens"].add_metric(labels, t.draft_n_accepted)
                c["specmon_rounds"].add_metric(labels, m.steps.get(key, 0))
            if t.stepped:
                c["specmon_spec_decode_num_drafts"].add_metric(labels, t.spec_steps)
            for position, n in enumerate(t.accepted_per_pos):
                c["specmon_spec_decode_num_accepted_tokens_per_pos"].add_metric([*labels, str(position)], n)
            for clock, tokens, ms, n in (
                (SERVER_CLOCK, t.predicted_n, t.predicted_ms, t.timed),
                (PROXY_CLOCK, t.clocked_n, t.clocked_ms, t.clocked),
            ):
                if n:
                    c["specmon_decode_tokens"].add_metric([*labels, clock], tokens)
                    c["specmon_decode_seconds"].add_metric([*labels, clock], ms / 1e3)
        yield from c.values()

    def _routes(self) -> Iterator[Metric]:
        router = self.m.router
        side = GaugeMetricFamily(
            "specmon_route_side",
            "1 for the side the class is routed to now (both: alternating, learning)",
            labels=["class", "side"],
        )
        share = GaugeMetricFamily(
            "specmon_route_plain_share", "The share of the class's requests sent plain now", labels=["class"]
        )
        for name in (c.name for c in router.policy.classes):
            now = router.route_of(name)
            for s in SIDES:
                side.add_metric([name, s], 1.0 if s == now else 0.0)
            share.add_metric([name], router.share(name))
        yield side
        yield share
        bounds = {
            "": "spec/plain goodput over the requests the class's last move cited",
            "_low": "the low bound of its 95% interval (NaN: too few requests for one)",
            "_high": "the high bound of its 95% interval (NaN: too few requests for one)",
        }
        for suffix, doc in bounds.items():
            gauge = GaugeMetricFamily(f"specmon_route_spec_over_plain{suffix}", doc, labels=["class"])
            for name, decision in self.m.last_choice.items():
                choice = decision.route
                value = {"": choice.ratio, "_low": choice.low, "_high": choice.high}[suffix]
                gauge.add_metric([name], math.nan if value is None else value)
            yield gauge
