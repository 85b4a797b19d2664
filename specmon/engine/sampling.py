"""Turn logits into the distribution actually sampled from: temperature, then top-k, then top-p.

The same function is applied to target (p) and draft (q) logits, which is what keeps
speculative sampling exact (Leviathan et al. 2023; Chen et al. 2023).
"""

from __future__ import annotations

import numpy as np

from specmon.events.schema import Sampling


def probs_from_logits(logits: np.ndarray, sampling: Sampling) -> np.ndarray:
    """Rows of `logits` [T, V] to rows of probabilities [T, V] (float64); greedy: one-hot at the argmax."""
    logits = np.atleast_2d(logits)
    if sampling.greedy:
        out = np.zeros(logits.shape, dtype=np.float64)
        out[np.arange(logits.shape[0]), logits.argmax(axis=-1)] = 1.0
        return out
    scaled = logits.astype(np.float64) / sampling.temperature
    scaled -= scaled.max(axis=-1, keepdims=True)
    probs = np.exp(scaled)
    probs /= probs.sum(axis=-1, keepdims=True)
    for row in probs:
        if 0 < sampling.top_k < row.shape[0]:
            _keep_only(row, np.argpartition(-row, sampling.top_k - 1)[: sampling.top_k])
        if sampling.top_p < 1.0:
            _keep_only(row, _top_p_ids(row, sampling.top_p))
    return probs


def _keep_only(row: np.ndarray, keep: np.ndarray) -> None:
    kept = row[keep]
    row[:] = 0.0
    row[keep] = kept / kept.sum()


def _top_p_ids(row: np.ndarray, top_p: float) -> np.ndarray:
    """Smallest set of most probable tokens whose mass reaches top_p (ties broken by id)."""
    vocab = row.shape[0]
    width = min(64, vocab)
    while True:
        # Partial sort first: the nucleus is usually a few dozen tokens out of ~50k.
        ids = np.arange(vocab) if width >= vocab else np.argpartition(-row, width - 1)[:width]
        ids = ids[np.lexsort((ids, -row[ids]))]
        mass = np.cumsum(row[ids])
        if mass[-1] >= top_p or width >= vocab:
            cut = int(np.searchsorted(mass, top_p, side="left"))
            return ids[: min(cut, len(ids) - 1) + 1]
        width *= 8


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """One draw from a probability row by inverse CDF."""
    cdf = np.cumsum(probs)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(probs) - 1))
