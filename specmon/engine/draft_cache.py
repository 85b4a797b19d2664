"""A draft model's KV cache bookkeeping and its draft loop, shared by every backend.

A draft cache holds keys and values for a prefix of the tokens it was fed. After a round, the
context may have diverged from what was fed (a rejected draft token) or run past it (all k
accepted: the last draft token was never fed, and the bonus token is new). Each round feeds
only what the cache has not seen, and the cache is rolled back to the shared prefix first.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from specmon.engine.drafters import Proposal
from specmon.engine.sampling import probs_from_logits, sample
from specmon.events.schema import Sampling


class CachedDrafter:
    """A drafter that runs a model on a cache of its own: k one-token forwards (`_step`) a round.

    The cache is first rolled back to the longest prefix it shares with the context (`_plan`), so
    after a round where all k drafts were accepted it is fed the last draft token (never fed: its
    logits were not needed) together with the target's bonus token."""

    def __init__(self) -> None:
        self.fed: list[int] = []  # tokens whose keys/values sit in the draft cache, in order

    def begin(self, prompt: Sequence[int]) -> None:
        self.fed = []

    def _plan(self, context: Sequence[int]) -> tuple[int, list[int]]:
        """(positions to keep, tokens to feed); the last token is always fed, so its logits are fresh."""
        valid = 0
        limit = min(len(self.fed), len(context) - 1)
        while valid < limit and self.fed[valid] == context[valid]:
            valid += 1
        self.fed = list(context[:valid])
        return valid, list(context[valid:])

    def _step(self, tokens: list[int], start: int) -> np.ndarray:
        """Write `tokens` at positions start... of the cache; the last one's logits [1, vocab]."""
        raise NotImplementedError

    def propose(self, context: Sequence[int], k: int, sampling: Sampling, rng: np.random.Generator) -> Proposal:
        if k <= 0:
            return Proposal([], None)
        start, pending = self._plan(context)
        tokens: list[int] = []
        rows: list[np.ndarray] = []
        for _ in range(k):
            logits = self._step(pending, start)
            start += len(pending)
            self.fed.extend(pending)
            if sampling.greedy:  # q one-hot: no row
                token = int(logits[0].argmax())
            else:
                rows.append(probs_from_logits(logits, sampling)[0])
                token = sample(rows[-1], rng)
            tokens.append(token)
            pending = [token]
        return Proposal(tokens, np.stack(rows) if rows else None)
