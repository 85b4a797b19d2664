"""Accept rules: exact bookkeeping for greedy, and properties of the sampled rule."""

import numpy as np
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
