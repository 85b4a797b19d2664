"""How sure a speedup is: the goodput ratio with a 95% interval, from rounds grouped by prompt.

Prompts differ far more than rounds within one, so the prompt is the unit that is resampled:
a bootstrap over prompts (jointly when both sides ran the same prompts, as `run` pairs them;
independently otherwise, as a policy's plain steps fall on some prompts only). The
resampling is seeded, so a replay shows exactly the interval the live run showed.

Until the interval excludes 1.0 the honest word is "not yet known"; a ratio above what the
rounds' own counts allow (the sanity bound of docs/live-view.md) is noise, whatever its interval says; one from
rounds the host disturbed (10% or more: metrics.contention) is "busy host", neither faster nor slower."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from specmon.metrics import rates

CONFIDENCE = 0.95
RESAMPLES = 2000
MIN_PROMPTS = 2  # per side: with one prompt there is no spread to speak of
CACHED_PROMPTS = 256  # resample matrices are kept for up to this many prompts on both sides (4 MB an entry, 8 kept)


@dataclass(frozen=True)
class PromptTotals:
    """Σ emitted tokens and Σ round ms per prompt, for one class at one k."""

    emitted: dict[str, int]
    ms: dict[str, float]

    @property
    def prompts(self) -> int:
        return len(self.emitted)


@dataclass(frozen=True)
class SpeedupEstimate:
    ratio: float | None  # goodput(k) / goodput(plain) over all rounds: the policy's own figure
    low: float | None  # 95% interval; None while either side has fewer than MIN_PROMPTS prompts
    high: float | None
    prompts_spec: int
    prompts_plain: int
    bound: float | None  # the most the rounds' own counts allow (sanity bound)
    busy: bool = False  # enough of its rounds were disturbed by other work on the host (metrics.contention)

    @property
    def verdict(self) -> str:
        """'noise', 'busy host', 'not yet known', 'faster' or 'slower'."""
        if self.ratio is None:
            return "not yet known"
        if self.bound is not None and self.ratio > self.bound * 1.0001:
            return "noise"
        if self.busy:
            return "busy host"  # its times say as much about the other work as about speculation
        if self.low is None or self.low <= 1.0 <= self.high:
            return "not yet known"
        return "faster" if self.low > 1.0 else "slower"


def speedup_estimate(
    spec: PromptTotals, plain: PromptTotals, bound: float | None = None, seed: int = 0, busy: bool = False
) -> SpeedupEstimate:
    """The goodput ratio spec/plain and its bootstrap interval over prompts."""
    ratio = rates.speedup(_goodput(spec), _goodput(plain))
    low = high = None
    if ratio is not None and spec.prompts >= MIN_PROMPTS and plain.prompts >= MIN_PROMPTS:
        low, high = _bootstrap(spec, plain, seed) or (None, None)
    return SpeedupEstimate(ratio, low, high, spec.prompts, plain.prompts, bound, busy)


def tok_per_s_interval(totals: PromptTotals, seed: int = 0) -> tuple[float, float] | None:
    """95% bootstrap interval over prompts of one side's goodput in tokens per second; None below MIN_PROMPTS."""
    if totals.prompts < MIN_PROMPTS:
        return None
    emitted, ms = _arrays(totals, sorted(totals.emitted))
    counts, _ = _resample_counts.__wrapped__(seed, totals.prompts, None)  # a report's, asked once: not cached
    with np.errstate(divide="ignore", invalid="ignore"):
        return _span(counts @ emitted / (counts @ ms) * 1e3)


def sanity_bound(mean_accepted: float | None, plain_step_ms: float | None, mean_round_ms: float | None) -> float | None:
    """speedup <= (1 + mean accepted) x plain step ms / mean round ms: a round emits at most
    accepted + 1 tokens at its measured cost."""
    if mean_accepted is None or not plain_step_ms or not mean_round_ms:
        return None
    return (1.0 + mean_accepted) * plain_step_ms / mean_round_ms


def _goodput(totals: PromptTotals) -> float | None:
    return rates.goodput(sum(totals.emitted.values()), sum(totals.ms.values()))


def _bootstrap(spec: PromptTotals, plain: PromptTotals, seed: int) -> tuple[float, float] | None:
    paired = set(spec.emitted) == set(plain.emitted)
    names = sorted(spec.emitted)
    s_e, s_ms = _arrays(spec, names)
    p_names = names if paired else sorted(plain.emitted)
    p_e, p_ms = _arrays(plain, p_names)
    counts = _resample_counts if len(names) + len(p_names) <= CACHED_PROMPTS else _resample_counts.__wrapped__
    s_counts, p_counts = counts(seed, len(names), None if paired else len(p_names))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = (s_counts @ s_e / (s_counts @ s_ms)) / (p_counts @ p_e / (p_counts @ p_ms))
    return _span(ratios)


@lru_cache(maxsize=8)
def _resample_counts(seed: int, n_spec: int, n_plain: int | None) -> tuple[np.ndarray, np.ndarray]:
    """How often each prompt is drawn in each resample (the seeded draws, plain's after spec's
    unless paired), as matrices: a resample's sums are then one product, and a policy checking
    every few rounds draws the same n's indices once (draws and gathers were 5-10x the rest)."""
    rng = np.random.default_rng(seed)
    s_counts = _counts(rng.integers(0, n_spec, size=(RESAMPLES, n_spec)), n_spec)
    p_counts = s_counts if n_plain is None else _counts(rng.integers(0, n_plain, size=(RESAMPLES, n_plain)), n_plain)
    return s_counts, p_counts


def _counts(idx: np.ndarray, n: int) -> np.ndarray:
    flat = (idx + n * np.arange(len(idx))[:, None]).ravel()
    counts = np.bincount(flat, minlength=len(idx) * n).reshape(len(idx), n).astype(float)
    counts.flags.writeable = False  # shared by every later call with the same n
    return counts


def _span(resampled: np.ndarray) -> tuple[float, float] | None:
    """The central CONFIDENCE interval of the finite resampled values; None if none is finite."""
    finite = resampled[np.isfinite(resampled)]
    if not len(finite):
        return None
    tail = (1.0 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(finite, [tail, 100 - tail])
    return float(low), float(high)


def _arrays(totals: PromptTotals, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    return tuple(np.array([side[n] for n in names], dtype=float) for side in (totals.emitted, totals.ms))
