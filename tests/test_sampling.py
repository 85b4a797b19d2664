"""The transform applied to p and q: temperature, then top-k, then top-p."""

import numpy as np
import pytest

from specmon.engine.sampling import probs_from_logits, sample
from specmon.events.schema import Sampling


def test_greedy_is_one_hot_at_the_argmax():
    probs = probs_from_logits(np.array([[0.1, 3.0, 2.9]]), Sampling(temperature=0.0))
    assert probs.tolist() == [[0.0, 1.0, 0.0]]


def test_temperature_scales_logits_before_softmax():
    logits = np.log(np.array([[0.2, 0.3, 0.5]]))
    got = probs_from_logits(logits, Sampling(temperature=0.5))[0]
    want = np.array([0.04, 0.09, 0.25]) / 0.38
    assert got == pytest.approx(want)


def test_top_k_keeps_the_k_most_probable_renormalised():
    logits = np.log(np.array([[0.1, 0.4, 0.2, 0.3]]))
    got = probs_from_logits(logits, Sampling(temperature=1.0, top_k=2))[0]
    assert got == pytest.approx([0.0, 4 / 7, 0.0, 3 / 7])


def test_top_p_keeps_the_smallest_set_reaching_the_mass():
    logits = np.log(np.array([[0.1, 0.4, 0.2, 0.3]]))
    got = probs_from_logits(logits, Sampling(temperature=1.0, top_p=0.6))[0]
    assert got == pytest.approx([0.0, 4 / 7, 0.0, 3 / 7])  # 0.4 < 0.6 so 0.3 joins; 0.7 >= 0.6
    got = probs_from_logits(logits, Sampling(temperature=1.0, top_p=0.4))[0]
    assert got == pytest.approx([0.0, 1.0, 0.0, 0.0])


def test_top_p_on_a_large_vocabulary_matches_a_full_sort():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(2, 50_000)) * 3
    got = probs_from_logits(logits, Sampling(temperature=0.7, top_p=0.9))
    for row_logits, row in zip(logits, got):
        full = np.exp((row_logits - row_logits.max()) / 0.7)
        full /= full.sum()
        order = np.argsort(-full, kind="stable")
        cut = int(np.searchsorted(np.cumsum(full[order]), 0.9)) + 1
        assert set(np.flatnonzero(row)) == set(order[:cut].tolist())
        assert row.sum() == pytest.approx(1.0)


def test_sample_follows_the_distribution():
    rng = np.random.default_rng(0)
    probs = np.array([0.1, 0.0, 0.6, 0.3])
    draws = np.bincount([sample(probs, rng) for _ in range(20_000)], minlength=4) / 20_000
    assert draws[1] == 0
    assert draws == pytest.approx(probs, abs=0.015)
