"""Speculative sampling preserves the target's distribution (Leviathan et al. 2023, Theorem 1).

Fixed seeds, 100,000 draws each; a chi-square test at the 0.1% level must pass for the real
rule and fail for a deliberately wrong one (rejections resampled from p instead of max(0, p - q)).
The draws run as numpy batches through `batched_accept`, accept_sampled's rule over many rounds
at once; each test first checks that specmon.engine.accept.accept_sampled, given the same
uniforms, returns exactly the batch's verdict round for round, so the test speaks for it.
"""

import numpy as np
import pytest

from specmon.engine.accept import Verdict, accept_sampled
from specmon.engine.sampling import probs_from_logits
from specmon.events.schema import Sampling

DRAWS = 100_000
Z_999 = 3.0902  # one-sided normal quantile for alpha = 0.001
LINK_ROUNDS = 3_000  # rounds on which accept_sampled itself must give the batch's verdict


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


def residual(p_row, q_row, drafted):
    """What a rejection resamples from: normalize(max(0, p - q)); q one-hot on `drafted` when None."""
    out = p_row.copy()
    if q_row is None:
        out[drafted] = 0.0
    else:
        out = np.maximum(out - q_row, 0.0)
    return out if out.sum() > 0.0 else p_row  # p == q: rejection has probability zero


def resample_from_p(p_row, q_row, drafted):
    """The wrong rule: accepts correctly but resamples a rejection from p, biased toward tokens q likes."""
    return p_row


def sample_rows(probs, uniforms):
    """specmon.engine.sampling.sample for many uniforms: inverse CDF of one probability row."""
    cdf = np.cumsum(probs)
    return np.minimum(np.searchsorted(cdf, uniforms * cdf[-1], side="right"), len(probs) - 1)


def batched_accept(proposed, span, at, u, us, p_rows, q_rows, resample=residual):
    """accept_sampled over a batch of rounds: round n drafted proposed[n, :span[n]] for positions
    at[n]..., tests acceptance with uniforms u[n] and draws its last token with us[n].
    Returns (accepted prefix lengths, next tokens)."""
    rounds, k = proposed.shape
    cols = np.arange(k)
    rows = np.minimum(at[:, None] + cols, len(p_rows) - 1)  # past a round's span: clipped, then ignored
    p_x = p_rows[rows, proposed]
    q_x = 1.0 if q_rows is None else q_rows[np.minimum(rows, len(q_rows) - 1), proposed]
    ok = (u * q_x < p_x) | (cols >= span[:, None])  # u < p/q without dividing by a zero q
    accepted = np.where(ok.all(axis=1), span, np.argmin(ok, axis=1))
    rejected = accepted < span
    row = at + accepted
    drafted = proposed[np.arange(rounds), np.minimum(accepted, k - 1)]  # the rejected token, if any
    next_token = np.empty(rounds, dtype=np.int64)
    for r in np.unique(row):
        bonus = (row == r) & ~rejected
        next_token[bonus] = sample_rows(p_rows[r], us[bonus])
        for x in np.unique(drafted[(row == r) & rejected]):
            group = (row == r) & rejected & (drafted == x)
            q_row = None if q_rows is None else q_rows[r]
            next_token[group] = sample_rows(resample(p_rows[r], q_row, x), us[group])
    return accepted, next_token


def draw_proposals(q_rows, at, k, rng):
    """k draft tokens per round from q's rows at[n], at[n] + 1, ... (clipped past the last row)."""
    rows = np.minimum(at[:, None] + np.arange(k), len(q_rows) - 1)
    cdf = np.cumsum(q_rows, axis=1)[rows]
    target = rng.random(rows.shape) * cdf[..., -1]
    return np.minimum((cdf <= target[..., None]).sum(axis=-1), q_rows.shape[1] - 1)  # searchsorted, "right"


def decode_positions(p_rows, q_rows, k, resample, seed, n_positions=3, draws=DRAWS):
    """Emit n_positions tokens by speculative rounds over position-indexed p and q, all draws at
    once, round by round; count each position's token."""
    rng = np.random.default_rng(seed)
    vocab = p_rows.shape[1]
    counts = np.zeros(n_positions * vocab, dtype=np.int64)
    pos = np.zeros(draws, dtype=np.int64)
    while (live := np.flatnonzero(pos < n_positions)).size:
        at = pos[live]
        span = np.minimum(k, n_positions - at)  # p needs n_positions + 1 rows for the bonus
        proposed = draw_proposals(q_rows, at, k, rng)
        accepted, next_token = batched_accept(
            proposed, span, at, rng.random((live.size, k)), rng.random(live.size), p_rows, q_rows, resample
        )
        emitted = np.minimum(accepted + 1, n_positions - at)
        for j in range(k + 1):
            token = np.where(j < accepted, proposed[:, min(j, k - 1)], next_token)
            counts += np.bincount(((at + j) * vocab + token)[j < emitted], minlength=counts.size)
        pos[live] = at + emitted
    return counts.reshape(n_positions, vocab)


class ScriptedRng:
    """Stands in for np.random.Generator: hands out given uniforms in order."""

    def __init__(self, uniforms):
        self.uniforms, self.used = list(uniforms), 0

    def random(self, size=None):
        if size is None:
            self.used += 1
            return self.uniforms[self.used - 1]
        self.used += size
        return np.array(self.uniforms[self.used - size : self.used])


def assert_batch_is_accept_sampled(p_rows, q_rows, k, seed, n_positions):
    """accept_sampled itself, on LINK_ROUNDS rounds (drafts from q, and drafts of any token so
    that p(x) = 0 and q(x) = 0 come up), gives exactly batched_accept's verdicts, given the
    uniforms in the order it draws them: k for the accept tests, then one for the last token."""
    rng = np.random.default_rng(seed + 1000)
    vocab = p_rows.shape[1]
    at = rng.integers(0, n_positions, LINK_ROUNDS)
    span = np.minimum(k, n_positions - at)
    proposed = rng.integers(0, vocab, (LINK_ROUNDS, k))
    if q_rows is not None:
        proposed = np.where(rng.random((LINK_ROUNDS, 1)) < 0.8, draw_proposals(q_rows, at, k, rng), proposed)
    u, us = rng.random((LINK_ROUNDS, k)), rng.random(LINK_ROUNDS)
    accepted, next_token = batched_accept(proposed, span, at, u, us, p_rows, q_rows)
    assert 0 < np.mean(accepted < span) < 1, "the rounds reach both a rejection and the bonus token"
    for n in range(LINK_ROUNDS):
        s, a = span[n], at[n]
        scripted = ScriptedRng([*u[n, :s], us[n]])
        q = None if q_rows is None else q_rows[a : a + s]
        verdict = accept_sampled(proposed[n, :s].tolist(), p_rows[a : a + s + 1], q, scripted)
        assert verdict == Verdict(int(accepted[n]), int(next_token[n])), f"round {n}: drafted {proposed[n, :s]} at {a}"
        assert scripted.used == s + 1


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
    assert_batch_is_accept_sampled(p, q, 2, sampling.seed, n_positions=3)
    right = decode_positions(p, q, 2, residual, seed=sampling.seed)
    assert right.sum(axis=1).tolist() == [DRAWS] * 3
    for pos in range(3):
        assert not chi_square_fails(right[pos], p[pos]), f"position {pos} drifted from p"
    wrong = decode_positions(p, q, 2, resample_from_p, seed=sampling.seed)
    assert any(chi_square_fails(wrong[pos], p[pos]) for pos in range(3))


def test_one_hot_draft_preserves_p():
    """An n-gram drafter has no distribution: q is one-hot on its token."""
    rng = np.random.default_rng(9)
    p = probs_from_logits(rng.normal(size=(2, 6)), Sampling(temperature=1.0))
    assert_batch_is_accept_sampled(p, None, 1, seed=9, n_positions=1)
    for resample, fails in [(residual, False), (resample_from_p, True)]:
        accepted, next_token = batched_accept(
            np.full((DRAWS, 1), 2),
            np.ones(DRAWS, dtype=np.int64),
            np.zeros(DRAWS, dtype=np.int64),
            rng.random((DRAWS, 1)),
            rng.random(DRAWS),
            p,
            None,
            resample,
        )
        counts = np.bincount(np.where(accepted == 1, 2, next_token), minlength=6)
        assert chi_square_fails(counts, p[0]) == fails, resample.__name__


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
    assert_batch_is_accept_sampled(p2, q, 1, seed=11, n_positions=1)
    right = decode_positions(p2, q, 1, residual, seed=11, n_positions=1)
    assert not chi_square_fails(right[0], p[0])
    wrong = decode_positions(p2, q, 1, resample_from_p, seed=11, n_positions=1)
    assert chi_square_fails(wrong[0], p[0])


def _tensor(ids):
    import torch

    return torch.tensor(ids)
