"""Drafters propose up to k tokens per round behind one small interface.

Model-based drafters (layer-skip self-draft, a separate draft model) live in the backends,
since they run torch; the n-gram prompt-lookup drafter needs no model and lives here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from specmon.events.schema import Sampling


@dataclass
class Proposal:
    tokens: list[int]
    q: np.ndarray | None  # draft distributions [len(tokens), V]; None means one-hot (no model)


class Drafter(Protocol):
    name: str

    def begin(self, prompt: Sequence[int]) -> None:
        """Forget any previous prompt's state."""

    def propose(self, context: Sequence[int], k: int, sampling: Sampling,
                rng: np.random.Generator) -> Proposal:
        """Up to k draft tokens that continue `context` (prompt plus tokens emitted so far)."""


class NoDrafter:
    """Plain decoding: proposes nothing, so every round is one target step."""

    name = "none"

    def begin(self, prompt: Sequence[int]) -> None:
        pass

    def propose(self, context, k, sampling, rng) -> Proposal:
        return Proposal([], None)


class NgramDrafter:
    """Prompt lookup: find the latest earlier occurrence of the last n tokens, copy what followed.

    Tries each n in `ngram_sizes` (longest first). Costs microseconds; q is one-hot.
    """

    def __init__(self, ngram_sizes: Sequence[int] = (3, 2)):
        self.ngram_sizes = sorted(ngram_sizes, reverse=True)
        self.name = "ngram"

    def begin(self, prompt: Sequence[int]) -> None:
        pass

    def propose(self, context, k, sampling, rng) -> Proposal:
        if k <= 0:
            return Proposal([], None)
        ctx = np.asarray(context, dtype=np.int64)
        for n in self.ngram_sizes:
            start = _latest_match(ctx, n)
            if start is not None:
                return Proposal(ctx[start + n: start + n + k].tolist(), None)
        return Proposal([], None)


def _latest_match(ctx: np.ndarray, n: int) -> int | None:
    """Start of the latest earlier occurrence of ctx[-n:] that has a token after it."""
    if len(ctx) <= n:
        return None
    windows = np.lib.stride_tricks.sliding_window_view(ctx[:-1], n)
    hits = np.flatnonzero((windows == ctx[-n:]).all(axis=1))
    return int(hits[-1]) if len(hits) else None
