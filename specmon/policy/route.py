"""Where a proxied class's requests go: the side (an upstream that speculates, or one that does not)
whose measured goodput is higher, the other side keeping a small exploration share.

Goodput here is a request's generated tokens over its decode ms, as the upstream reported them, or,
for a class one of whose replies gave no decode time, over the proxy's clock for every request of it
(metrics.served.timing: one definition); a request is the unit the interval resamples
(metrics.interval), as a prompt is in a session. The rule, the same live (proxy.routing) and in
`specmon policy explain`:
- a class starts on BOTH sides (its requests alternate) until each has `min_requests` timed ones;
  then it goes where the point estimate is higher;
- it moves (from BOTH too, once each side has half of `min_requests`) when the 95% interval of
  spec/plain over each side's last `window` requests excludes 1.0 (the interval is the hysteresis).
Replies an earlier session stored (proxy.recall) enter the estimate as requests too (stored_request),
each with the figures the decision cites, so explain draws the same estimate again."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from fractions import Fraction

from specmon.events.schema import RequestTimed, StoredReply
from specmon.metrics.format import count
from specmon.metrics.interval import PromptTotals, SpeedupEstimate, speedup_estimate
from specmon.metrics.served import PROXY_CLOCK, SERVER_CLOCK, timing

SPEC, PLAIN, BOTH = "spec", "plain", "both"


def timed(ev: RequestTimed, clock: str | None = None) -> bool:
    """A successful reply with its tokens and ms on `clock` (None: either; metrics.served.timing)."""
    return timing(ev, clock) is not None


def request_totals(events: Iterable[RequestTimed], clock: str = SERVER_CLOCK) -> PromptTotals:
    """Generated tokens and ms per request on `clock`: each request timed on it one unit of the bootstrap."""
    timings = {ev.request_id: t for ev in events if (t := timing(ev, clock)) is not None}
    return PromptTotals({rid: t.tokens for rid, t in timings.items()}, {rid: t.ms for rid, t in timings.items()})


def estimate(spec: Iterable[RequestTimed], plain: Iterable[RequestTimed], clock: str = SERVER_CLOCK) -> SpeedupEstimate:
    """spec/plain goodput on `clock` with its 95% interval over requests (seeded: explain draws the same)."""
    return speedup_estimate(request_totals(spec, clock), request_totals(plain, clock))


def choose(side: str, est: SpeedupEstimate, min_requests: int) -> str:
    """The side a class goes to next, from the side it is on and the estimate over both windows."""
    fewest = min(est.prompts_spec, est.prompts_plain)
    if est.ratio is None or fewest < min_requests // 2:
        return side
    if est.verdict == "faster":  # a clear interval moves a class early: where sides differ most, learning costs most
        return SPEC
    if est.verdict == "slower":
        return PLAIN
    if side == BOTH and fewest >= min_requests:
        return SPEC if est.ratio >= 1.0 else PLAIN
    return side


def borrowed_words(name: str, cited: Iterable[RequestTimed]) -> str:
    """`(6 of them chat's) `: how many of a decision's cited requests were other classes', which a class
    with too few of its own borrowed (proxy.routing); "" where none were."""
    lent = [r for r in cited if r.prompt_class != name]
    return f"({len(lent)} of them {', '.join(sorted({r.prompt_class for r in lent}))}'s) " if lent else ""


def stored_request(reply: StoredReply, name: str) -> RequestTimed:
    """A stored reply as the request it stands for: timed on its clock with its tokens and ms, and on
    no other (a proxy-clock figure is a whole reply's, as sent; metrics.served.timing)."""
    proxy = reply.clock == PROXY_CLOCK
    return RequestTimed(
        session_id=reply.session_id,
        t=0.0,
        request_id=reply.request_id,
        prompt_class=name,
        class_rule="",
        upstream=reply.side,
        endpoint="chat",
        status=200,
        stream=False,
        predicted_n=reply.tokens,
        predicted_ms=None if proxy else reply.ms,
        total_ms=reply.ms if proxy else None,
    )


def stored_words(recalled: Iterable[StoredReply]) -> str:
    """`(5 of them stored by session S) `: how many of a decision's requests were earlier sessions'
    (proxy.recall), and whose; "" where none were."""
    by = Counter(reply.session_id for reply in recalled)
    if len(by) <= 1:
        return "".join(f"({n} of them stored by session {sid}) " for sid, n in by.items())
    sessions = ", ".join(f"{n} by session {sid}" for sid, n in sorted(by.items()))
    return f"({sum(by.values())} of them stored: {sessions}) "


def cited_words(request_ids: list[str], recalled: list[StoredReply]) -> str:
    """`12 requests (8 of them stored)`: what a routing decision was drawn from (its Decision names the
    requests in the log, its RouteChoice the stored ones with their figures)."""
    stored = f" ({len(recalled)} of them stored)" if recalled else ""
    return f"{count(len(request_ids) + len(recalled), 'request')}{stored}"


def explore_to(side: str, n: int, share: float) -> bool:
    """Whether a class's request n (0-based, counted since its last decision) goes to the side it
    is not on: spread evenly, so after n requests floor(n·share) went there (BOTH: every other one)."""
    exact = Fraction(1, 2) if side == BOTH else Fraction(share).limit_denominator(10_000)  # no float drift
    return math.floor((n + 1) * exact) > math.floor(n * exact)
