"""Accept rules: exact bookkeeping for greedy, and properties of the sampled rule."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from specmon.engine.accept import accept_greedy, accept_sampled, alpha_hat


def test_greedy_accepts_the_matching_prefix_then_corrects():
    verdict = accept_greedy([5, 6, 7, 8], np.array([5, 6, 9, 8, 1]))
    assert (verdict.accepted, verdict.next_token, verdict.rejection_pos(4)) == (2, 9, 2)


def test_greedy_all_accepted_gives_the_bonus_token():
    verdict = accept_greedy([5, 6], np.array([5, 6, 42]))
    assert (verdict.accepted, verdict.next_token, verdict.rejection_pos(2)) == (2, 42, None)


def test_greedy_empty_proposal_is_one_plain_step():
    verdict = accept_greedy([], np.array([17]))
    assert (verdict.accepted, verdict.next_token, verdict.rejection_pos(0)) == (0, 17, None)


def _dist(draw, vocab):
    raw = draw(st.lists(st.floats(0.0, 1.0), min_size=vocab, max_size=vocab))
    row = np.array(raw) + 1e-3
    return row / row.sum()


@st.composite
def rounds(draw):
    vocab = draw(st.integers(2, 8))
    k = draw(st.integers(0, 5))
    p = np.stack([_dist(draw, vocab) for _ in range(k + 1)])
    q = np.stack([_dist(draw, vocab) for _ in range(k)]) if k else np.zeros((0, vocab))
    proposed = [draw(st.integers(0, vocab - 1)) for _ in range(k)]
    return p, q, proposed, draw(st.integers(0, 2**32 - 1))


@settings(max_examples=300, deadline=None)
@given(rounds())
def test_sampled_verdict_is_well_formed(case):
    p, q, proposed, seed = case
    verdict = accept_sampled(proposed, p, q, np.random.default_rng(seed))
    assert 0 <= verdict.accepted <= len(proposed)
    assert 0 <= verdict.next_token < p.shape[1]
    if verdict.accepted < len(proposed):
        # A correction is never the token just rejected: the residual has no mass there.
        rejected = proposed[verdict.accepted]
        if p[verdict.accepted, rejected] < q[verdict.accepted, rejected]:
            assert verdict.next_token != rejected


@settings(max_examples=200, deadline=None)
@given(rounds())
def test_identical_distributions_accept_everything(case):
    p, _, proposed, seed = case
    verdict = accept_sampled(proposed, p, p[: len(proposed)], np.random.default_rng(seed))
    assert verdict.accepted == len(proposed)


def test_alpha_hat_is_one_minus_total_variation():
    p = np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    q = np.array([[0.1, 0.9, 0.0]])
    assert alpha_hat(p, q, [1]) == np.minimum(p[0], q[0]).sum() == 0.6
    assert alpha_hat(p, None, [0]) == 0.5  # q one-hot: sum min(p, q) = p(x)
    assert alpha_hat(p, None, []) is None


def test_round_figures_from_the_argmax_match_the_full_vocabulary_computations():
    """Margins (top-1 minus top-2 logit, ties included) equal a partition's; p(x) under greedy is
    the float64 softmax's to float32 precision, over a real vocabulary's width."""
    from specmon.engine.drafters import Proposal
    from specmon.engine.rounds import _greedy_alpha, _logit_margins, _target_probs

    rng = np.random.default_rng(4)
    logits = (rng.standard_normal((6, 49152)) * 4).astype(np.float32)
    logits[1, 7] = logits[1].max()  # a tie: margin 0
    top = logits.argmax(axis=-1)
    top2 = np.partition(logits, -2, axis=-1)[:, -2:]
    assert _logit_margins(logits, top) == (top2[:, 1] - top2[:, 0]).astype(float).tolist()
    assert _logit_margins(logits, top)[1] == 0.0
    proposed = [int(top[0]), int(top[1]) ^ 1, int(top[2]), 5, int(top[4])]
    wide = logits[:5].astype(np.float64)
    expected = np.exp(
        wide[np.arange(5), proposed] - np.log(np.exp(wide - wide.max(-1, keepdims=True)).sum(-1)) - wide.max(-1)
    )
    assert _target_probs(logits, top, None, proposed) == pytest.approx(expected.tolist(), rel=1e-6)
    assert _greedy_alpha(top, Proposal(proposed, None)) == pytest.approx(3 / 5)
