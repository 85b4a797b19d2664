"""Bookkeeping for a draft model's KV cache, shared by every backend (torch, ExLlamaV2).

A draft cache holds keys and values for a prefix of the tokens it was fed. After a round, the
context may have diverged from what was fed (a rejected draft token) or run past it (all k
accepted: the last draft token was never fed, and the bonus token is new). Each round feeds
only what the cache has not seen, and the cache is rolled back to the shared prefix first.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from specmon.engine.sampling import probs_from_logits, sample
from specmon.events.schema import Sampling


class CacheLedger:
    """Which tokens sit in a draft cache, in order."""

    def __init__(self) -> None:
        self.fed: list[int] = []

    def reset(self) -> None:
        self.fed = []

    def plan(self, context: Sequence[int]) -> tuple[int, list[int]]:
        """(positions to keep, tokens to feed) so the cache ends holding all of `context`.

        The last token is always fed, so its logits (the next draft token's) are fresh."""
        valid = 0
        limit = min(len(self.fed), len(context) - 1)
        while valid < limit and self.fed[valid] == context[valid]:
            valid += 1
        self.fed = list(context[:valid])
        return valid, list(context[valid:])

    def feed(self, tokens: Sequence[int]) -> None:
        self.fed.extend(tokens)


def choose_draft_token(
    logits: np.ndarray, sampling: Sampling, rng: np.random.Generator
) -> tuple[int, np.ndarray | None]:
    """Greedy drafts the argmax (q one-hot, so None); sampling draws from the transformed q."""
    if sampling.greedy:
        return int(logits[0].argmax()), None
    q = probs_from_logits(logits, sampling)[0]
    return sample(q, rng), q
