"""Which upstream a request goes to: with a plain upstream, a share of each class's requests goes
there, spread evenly through the class's traffic (interleaved), so both sides see the same mix of
prompts over the same stretch of time."""

from __future__ import annotations

import math
from fractions import Fraction

SPEC, PLAIN = "spec", "plain"


class Interleave:
    """Request n (0-based) of a class goes plain when floor((n+1)·share) > floor(n·share): after any
    n requests the class has sent floor(n·share) plain, the nearest a whole count can be."""

    def __init__(self, share: float, has_plain: bool):
        self.share = Fraction(share).limit_denominator(10_000) if has_plain else Fraction(0)  # exact: no float drift
        self.seen: dict[str, int] = {}

    def upstream(self, prompt_class: str) -> str:
        n = self.seen.get(prompt_class, 0)
        self.seen[prompt_class] = n + 1
        return PLAIN if math.floor((n + 1) * self.share) > math.floor(n * self.share) else SPEC
