"""Speculative sampling preserves the target's distribution (Leviathan et al. 2023, Theorem 1).

Fixed seeds, 100,000+ draws each; a chi-square test at the 0.1% level must pass for the real
rule and fail for a deliberately wrong one (rejections resampled from p instead of max(0, p - q)).
"""

import numpy as np
import pytest

from specmon.engine.accept import Verdict, accept_sampled
from specmon.engine.sampling import probs_from_logits, sample
from specmon.events.schema import Sampling

DRAWS = 100_000
Z_999 = 3.0902  # one-sided normal quantile for alpha = 0.001


def wrong_rule(proposed, p, q, rng):
    """Accepts correctly but resamples a rejection from p: biased toward tokens q likes."""
    k = len(proposed)
    for i, x in enumerate(proposed):
        if rng.random() * q[i, x] >= p[i, x]:
            return Verdict(i, sample(p[i], rng))
    return Verdict(k, sample(p[k], rng))


def chi_square_fails(counts: np.ndarray, probs: np.ndarray) -> bool:
    """Pearson's test, cells with expected count < 5 pooled; Wilson-Hilferty critical value."""
    expected = probs * counts.sum()
    small = expected < 5
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    stat = float((((obs - exp) ** 2)[keep] / exp[keep]).sum())
    df = int(keep.sum()) - 1
    assert df >= 1, "a one-token distribution tests nothing"
    critical = df * (1 - 2 / (9 * df) + Z_999 * np.sqrt(2 / (9 * df))) ** 3
    return stat > critical


def decode_positions(p_rows, q_rows, k, rule, seed, n_positions=3, draws=DRAWS):
    """Emit n_positions tokens by speculative rounds over position-indexed p and q; count each position."""
    rng = np.random.default_rng(seed)
    vocab = p_rows.shape[1]
    counts = np.zeros((n_positions, vocab), dtype=np.int64)
    q_cdf = np.cumsum(q_rows, axis=1)
    for _ in range(draws):
        pos = 0
        while pos < n_positions:
            span = min(k, n_positions - pos)  # p needs n_positions + 1 rows for the bonus
            proposed = [int(np.searchsorted(q_cdf[pos + i], rng.random() * q_cdf[pos + i, -1], "right"))
                        for i in range(span)]
            verdict = rule(proposed, p_rows[pos:pos + span + 1], q_rows[pos:pos + span], rng)
            for token in [*proposed[: verdict.accepted], verdict.next_token][: n_positions - pos]:
                counts[pos, token] += 1
                pos += 1
    return counts


SETTINGS = [
    Sampling(temperature=1.0, seed=1),
    Sampling(temperature=0.7, top_k=5, seed=2),
    Sampling(temperature=1.3, top_p=0.8, seed=3),
    Sampling(temperature=0.9, top_k=6, top_p=0.9, seed=4),
]


@pytest.mark.parametrize("sampling", SETTINGS, ids=lambda s: f"T{s.temperature}-k{s.top_k}-p{s.top_p}")
def test_synthetic_rounds_preserve_p_and_a_wrong_rule_is_caught(sampling):
    rng = np.random.default_rng(sampling.seed)
    p = probs_from_logits(rng.normal(size=(4, 8)), sampling)
    q = probs_from_logits(rng.normal(size=(3, 8)), sampling)  # the same transform as p
    right = decode_positions(p, q, 2, accept_sampled, seed=sampling.seed)
    for pos in range(3):
        assert not chi_square_fails(right[pos], p[pos]), f"position {pos} drifted from p"
    wrong = decode_positions(p, q, 2, wrong_rule, seed=sampling.seed)
    assert any(chi_square_fails(wrong[pos], p[pos]) for pos in range(3))


def test_one_hot_draft_preserves_p():
    """An n-gram drafter has no distribution: q is one-hot on its token."""
    rng = np.random.default_rng(9)
    p = probs_from_logits(rng.normal(size=(2, 6)), Sampling(temperature=1.0))
    counts = np.zeros(6, dtype=np.int64)
    for _ in range(DRAWS):
        counts[_first_token(p, rng)] += 1
    assert not chi_square_fails(counts, p[0])


def _first_token(p, rng):
    verdict = accept_sampled([2], p, None, rng)
    return 2 if verdict.accepted else verdict.next_token


@pytest.mark.slow
@pytest.mark.parametrize("text", ["The capital of France is", "def fibonacci(n):\n    "])
def test_real_model_next_token_is_preserved(pair, text):
    """p from the embedded target, q from its 4-layer self-draft, on two real contexts."""
    from specmon.backends.torch_backend import LayerSkipDrafter

    ids = pair.tokenizer.encode(text)
    sampling = Sampling(temperature=1.5, top_k=40, seed=5)  # flat enough for the bias to show
    target_logits = pair.target.forward(ids, 0)[-1:]
    draft = LayerSkipDrafter(pair.target, 4)
    draft_logits = draft.model.forward(_tensor(ids), 0, pair.target.cache, 4)[-1:].numpy()
    p_full = probs_from_logits(target_logits, sampling)
    q_full = probs_from_logits(draft_logits, sampling)
    support = np.flatnonzero((p_full[0] > 0) | (q_full[0] > 0))  # top-40 of each: small arrays
    p, q = p_full[:, support], q_full[:, support]
    p2 = np.vstack([p, p])  # a bonus row for the all-accepted case; its draw is not counted
    right = decode_positions(p2, q, 1, accept_sampled, seed=11, n_positions=1)
    assert not chi_square_fails(right[0], p[0])
    wrong = decode_positions(p2, q, 1, wrong_rule, seed=11, n_positions=1)
    assert chi_square_fails(wrong[0], p[0])


def _tensor(ids):
    import torch

    return torch.tensor(ids)
