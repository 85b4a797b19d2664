"""What speculation buys each class of proxied traffic, and what the policy would change: the end of
every proxy session and `log info` of its log, in either mode. A class's requests to the speculating
upstream are set against its requests to the plain one: the goodput ratio (generated tokens per ms, on
the clock the class is judged on: the upstreams' own decode time, or the proxy's where a reply gave none;
metrics.served.timing) with a 95% interval from a bootstrap over each side's last tally.WINDOW timed
requests (metrics.interval: a request is the resampled unit); ClassAdvice.verdict says what it shows.

The advice itself applies nothing (applied_line says whether routing did, in enforce mode with a plain
side): llama-server takes no per-request switch for speculation or its draft length (build 287
ignores `speculative.n_max` in a request body: its drafts were the same), so a change of the server's
drafting is the user's to make."""

from __future__ import annotations

import math
from dataclasses import dataclass

from specmon.metrics.interval import SpeedupEstimate
from specmon.metrics.served import SERVER_CLOCK, RequestTotals
from specmon.policy import route
from specmon.policy.schema import Policy
from specmon.proxy.routing import PLAIN, SPEC
from specmon.proxy.tally import Tally

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
    clock: str = SERVER_CLOCK  # what the estimate's goodputs were timed on (Tally.clock)
    plain_given: bool = False  # the proxy had a plain side (a request of some class went there)

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
        if not self.plain.requests:  # why there is nothing to compare yet, never asking for a flag the user gave
            if speculate == "on":
                return 'none (speculate = "on" keeps the class on spec: nothing to compare with)'
            if self.plain_given:
                return "none (none of its requests went to the plain side yet)"
            return "none (no plain requests to compare with: give --plain-upstream)"
        est = self.estimate
        untimed = [side for side, n in ((SPEC, est.prompts_spec), (PLAIN, est.prompts_plain)) if not n]
        if untimed:
            return f"none (no {' or '.join(untimed)} reply said how many tokens it generated: nothing to time)"
        return f"none until the interval excludes 1.0{capped and ' (then' + capped[1:] + ')'}"


def draft_maximum(acceptance: float | None) -> int | None:
    """The longest draft k whose last token is still accepted at least UNLIKELY_NEXT of the time were acceptance
    the same at every position (acceptance^k >= UNLIKELY_NEXT); None where all was accepted or none drafted."""
    if acceptance is None or acceptance >= 1.0:
        return None
    if acceptance <= UNLIKELY_NEXT:
        return 1
    return max(1, math.floor(math.log(UNLIKELY_NEXT) / math.log(acceptance)))


def advise(tally: Tally) -> list[ClassAdvice]:
    """Per class seen, spec against plain on the class's clock, over each side's last window of timed requests."""
    out = []
    for name in tally.classes:
        clock = tally.clock(name)
        windows = [tally.recent.get((name, side), ()) for side in (SPEC, PLAIN)]  # the bootstrap's units
        estimate = route.estimate(*windows, clock)
        spec, plain = tally.side(name, SPEC), tally.side(name, PLAIN)
        out.append(ClassAdvice(name, spec, plain, estimate, clock, bool(tally.plain_given)))
    return out
