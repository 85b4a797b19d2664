"""What speculation buys each class of proxied traffic, and what the policy would change (advise
mode only). A class's requests to the speculating upstream are set against its requests to the plain
one: the goodput ratio (generated tokens per ms of the upstream's own decode time) with a 95% interval
from a bootstrap over requests (metrics.interval: a request is the resampled unit, emitted =
predicted_n, ms = predicted_ms). Until the interval excludes 1.0 the word is "not yet known".

Nothing is applied: llama-server takes no per-request switch for speculation or its draft length
(build 287 ignores `speculative.n_max` in a request body: its drafts were the same), so a change is
the user's to make on the server."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from specmon.events.schema import RequestTimed
from specmon.metrics.interval import PromptTotals, SpeedupEstimate, speedup_estimate
from specmon.metrics.served import RequestTotals, by_class
from specmon.policy.schema import Policy
from specmon.proxy.routing import PLAIN, SPEC

PAYS, COSTS, UNKNOWN = "speculation pays", "speculation costs", "not yet known"
NOT_APPLIED = (
    'advice only: nothing is routed (mode = "advise", or no --plain-upstream) and nothing is changed inside '
    "a server (none takes a per-request switch for speculation or its draft length; change its --spec-* flags)"
)
ROUTED = (
    "applied by routing: each class went to the side whose goodput was higher, the other kept "
    "routing.explore_share (the Decisions in the log; specmon policy explain LOG)"
)


def applied_line(policy: Policy | None, advice: list[ClassAdvice]) -> str:
    """Whether the policy routed this traffic (enforce mode, with a plain side) or only advised."""
    routed = policy is not None and policy.settings.mode == "enforce" and any(a.plain.requests for a in advice)
    return ROUTED if routed else NOT_APPLIED


UNLIKELY_NEXT = 0.1  # a draft position accepted less often than this is past the suggested draft maximum


@dataclass(frozen=True)
class ClassAdvice:
    prompt_class: str
    spec: RequestTotals
    plain: RequestTotals
    estimate: SpeedupEstimate

    @property
    def verdict(self) -> str:
        """PAYS or COSTS once the interval excludes 1.0; UNKNOWN before (or without a plain side)."""
        return {"faster": PAYS, "slower": COSTS}.get(self.estimate.verdict, UNKNOWN)

    def change(self, policy: Policy | None) -> str:
        """What the policy would change for the class, in its own keys."""
        cls = next((c for c in policy.classes if c.name == self.prompt_class), None) if policy else None
        speculate = cls.speculate if cls is not None else "auto"
        if self.verdict == COSTS:
            return 'would set speculate = "off"' if speculate != "off" else "none (speculate is already off)"
        cap = draft_maximum(self.spec.acceptance)
        capped = "" if cap is None else f", draft maximum {cap}"
        if self.verdict == PAYS:
            return ('would set speculate = "on"' if speculate == "off" else "keep speculation on") + capped
        if not self.plain.timed:
            return "none (no plain requests to compare with: give --plain-upstream)"
        return f"none until the interval excludes 1.0{capped and ' (then' + capped[1:] + ')'}"


def draft_maximum(acceptance: float | None) -> int | None:
    """The longest draft whose last token is still accepted at least UNLIKELY_NEXT of the time, were
    acceptance the same at every position (acceptance^k >= UNLIKELY_NEXT); None when every draft token
    was accepted (no cap follows) or nothing was drafted."""
    if acceptance is None or acceptance >= 1.0:
        return None
    if acceptance <= UNLIKELY_NEXT:
        return 1
    return max(1, math.floor(math.log(UNLIKELY_NEXT) / math.log(acceptance)))


def per_request(events: Iterable[RequestTimed], prompt_class: str, upstream: str) -> PromptTotals:
    """One class's timed, successful requests to one upstream, each request a unit of the bootstrap."""
    emitted: dict[str, int] = {}
    ms: dict[str, float] = {}
    for ev in events:
        if ev.prompt_class == prompt_class and ev.upstream == upstream and 200 <= ev.status < 300:
            if ev.predicted_n is not None and ev.predicted_ms:
                emitted[ev.request_id], ms[ev.request_id] = ev.predicted_n, ev.predicted_ms
    return PromptTotals(emitted, ms)


def advise(events: list[RequestTimed]) -> list[ClassAdvice]:
    """Per class seen (in order of first appearance), spec against plain."""
    totals = by_class(events)
    classes = list(dict.fromkeys(ev.prompt_class for ev in events))
    out = []
    for name in classes:
        estimate = speedup_estimate(per_request(events, name, SPEC), per_request(events, name, PLAIN))
        out.append(
            ClassAdvice(
                name, totals.get((name, SPEC), RequestTotals()), totals.get((name, PLAIN), RequestTotals()), estimate
            )
        )
    return out
