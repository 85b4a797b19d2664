"""The speedup interval: a bootstrap over prompts, seeded, honest with few prompts, and flagged as
noise above the bound the rounds' own counts allow."""

import numpy as np
import pytest

from specmon.metrics.interval import MIN_PROMPTS, RESAMPLES, PromptTotals, sanity_bound, speedup_estimate


def totals(rates_by_prompt: dict[str, float], ms: float = 1000.0) -> PromptTotals:
    """Prompts decoded for `ms` each at the given tokens per ms."""
    return PromptTotals({p: round(r * ms) for p, r in rates_by_prompt.items()}, {p: ms for p in rates_by_prompt})


def test_the_ratio_is_goodput_over_all_rounds_not_a_mean_of_per_prompt_ratios():
    spec = PromptTotals({"a": 30, "b": 10}, {"a": 1000.0, "b": 1000.0})
    plain = PromptTotals({"a": 20, "b": 20}, {"a": 1000.0, "b": 1000.0})
    assert speedup_estimate(spec, plain).ratio == pytest.approx(40 / 40)  # (30+10)/(20+20), not (1.5+0.5)/2


def test_a_consistent_win_over_many_prompts_is_faster_and_its_interval_excludes_one():
    rng = np.random.default_rng(1)
    base = {f"p{i}": float(rng.uniform(0.02, 0.04)) for i in range(12)}
    spec = totals({p: r * 1.4 * rng.uniform(0.95, 1.05) for p, r in base.items()})
    estimate = speedup_estimate(spec, totals(base))
    assert estimate.low > 1.25 and estimate.high < 1.55 and estimate.low <= estimate.ratio <= estimate.high
    assert estimate.verdict == "faster" and (estimate.prompts_spec, estimate.prompts_plain) == (12, 12)


def test_no_difference_is_not_yet_known_and_a_loss_is_slower():
    base = {f"p{i}": 0.02 + 0.002 * i for i in range(8)}
    same = speedup_estimate(
        totals({p: r * (1.02 if i % 2 else 0.98) for i, (p, r) in enumerate(base.items())}), totals(base)
    )
    assert same.low < 1.0 < same.high and same.verdict == "not yet known"
    assert speedup_estimate(totals({p: r * 0.6 for p, r in base.items()}), totals(base)).verdict == "slower"


def test_one_prompt_gives_a_ratio_but_no_interval():
    estimate = speedup_estimate(totals({"only": 0.05}), totals({"only": 0.02}))
    assert estimate.ratio == pytest.approx(2.5) and estimate.low is None and estimate.high is None
    assert estimate.verdict == "not yet known" and MIN_PROMPTS == 2


def test_a_ratio_above_the_sanity_bound_is_noise():
    # 0.5 accepted per round at a round cost of 2x a plain step can give at most 0.75x
    bound = sanity_bound(0.5, plain_step_ms=30.0, mean_round_ms=60.0)
    assert bound == pytest.approx(0.75)
    base = {f"p{i}": 0.03 for i in range(6)}
    estimate = speedup_estimate(totals({p: 0.045 for p in base}), totals(base), bound=bound)
    assert estimate.ratio == pytest.approx(1.5) and estimate.verdict == "noise"


def test_the_interval_is_the_same_on_every_call():
    base = {f"p{i}": 0.02 + 0.003 * i for i in range(5)}
    spec = totals({p: r * (1.1 + 0.05 * i) for i, (p, r) in enumerate(base.items())})
    first, again = speedup_estimate(spec, totals(base)), speedup_estimate(spec, totals(base))
    assert (first.low, first.high) == (again.low, again.high)


def test_the_interval_covers_the_true_ratio_about_95_percent_of_the_time():
    rng = np.random.default_rng(7)
    true, hits, trials = 1.3, 0, 300
    for _ in range(trials):
        base = {f"p{i}": float(rng.lognormal(np.log(0.03), 0.3)) for i in range(16)}
        spec = totals({p: r * true * float(rng.lognormal(0, 0.15)) for p, r in base.items()})
        estimate = speedup_estimate(spec, totals(base), seed=int(rng.integers(1 << 30)))
        hits += estimate.low <= true <= estimate.high
    assert 0.85 <= hits / trials <= 0.995  # percentile bootstrap over 16 prompts: near its nominal 95%


@pytest.mark.parametrize("plain_prompts", [9, 12])  # 9: the sides ran different prompts; 12: the same (paired)
def test_the_interval_resamples_whole_prompts_with_the_seeded_draws(plain_prompts):
    """The interval is the one from drawing prompt indices (seeded; plain's draws after spec's unless
    paired) and summing each resample's prompts: the matrix form must not change what is drawn."""
    rng = np.random.default_rng(3)
    spec = PromptTotals(
        {f"p{i:02}": int(rng.integers(5, 60)) for i in range(12)},
        {f"p{i:02}": float(rng.uniform(100, 900)) for i in range(12)},
    )
    plain = PromptTotals(
        {f"p{i:02}": int(rng.integers(5, 60)) for i in range(plain_prompts)},
        {f"p{i:02}": float(rng.uniform(100, 900)) for i in range(plain_prompts)},
    )
    draws = np.random.default_rng(11)
    s_idx = draws.integers(0, 12, size=(RESAMPLES, 12))
    p_idx = s_idx if plain_prompts == 12 else draws.integers(0, plain_prompts, size=(RESAMPLES, plain_prompts))

    def sums(totals: PromptTotals, idx):
        names = sorted(totals.emitted)
        emitted, ms = (np.array([t[n] for n in names], dtype=float) for t in (totals.emitted, totals.ms))
        return emitted[idx].sum(1) / ms[idx].sum(1)

    low, high = np.percentile(sums(spec, s_idx) / sums(plain, p_idx), [2.5, 97.5])
    estimate = speedup_estimate(spec, plain, seed=11)
    assert (estimate.low, estimate.high) == (pytest.approx(low, rel=1e-12), pytest.approx(high, rel=1e-12))
    assert estimate.low < estimate.ratio < estimate.high
