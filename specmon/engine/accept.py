"""Accept rules for one verified round: either way it ends with one target token, a correction at
the rejection or a bonus token."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specmon.engine.sampling import sample


@dataclass(frozen=True)
class Verdict:
    accepted: int  # length of the accepted prefix of the proposal
    next_token: int  # the correction (at the rejection) or the bonus token (all accepted)

    def rejection_pos(self, proposed_len: int) -> int | None:
        return self.accepted if self.accepted < proposed_len else None


def accept_greedy(proposed: list[int], target_argmax: np.ndarray) -> Verdict:
    """Accept while the draft token is the target's argmax (`target_argmax`: len(proposed) + 1 of them)."""
    accepted = 0
    while accepted < len(proposed) and proposed[accepted] == int(target_argmax[accepted]):
        accepted += 1
    return Verdict(accepted, int(target_argmax[accepted]))


def accept_sampled(proposed: list[int], p: np.ndarray, q: np.ndarray | None, rng: np.random.Generator) -> Verdict:
    """Accept draft token x with probability min(1, p(x)/q(x)); on rejection draw from normalize(max(0, p - q)).
    Target rows p [k+1, V], draft rows q [k, V]; `q=None`: a drafter with no distribution, q one-hot."""
    k = len(proposed)
    uniforms = rng.random(k)
    positions = np.arange(k)
    p_x = p[positions, proposed]
    q_x = np.ones(k) if q is None else q[positions, proposed]
    ok = uniforms * q_x < p_x  # u < p/q without dividing by a zero q
    accepted = int(np.argmin(ok)) if not ok.all() else k
    if accepted == k:
        return Verdict(k, sample(p[k], rng))
    residual = p[accepted].copy()
    if q is None:
        residual[proposed[accepted]] = 0.0
    else:
        residual = np.maximum(residual - q[accepted], 0.0)
    if residual.sum() <= 0.0:  # p == q exactly; rejection then has probability zero, but be safe
        residual = p[accepted]
    return Verdict(accepted, sample(residual, rng))


def alpha_hat(p: np.ndarray, q: np.ndarray | None, proposed: list[int]) -> float | None:
    """Mean over proposed positions of sum_x min(p(x), q(x)); q one-hot when None."""
    k = len(proposed)
    if k == 0:
        return None
    if q is None:
        return float(p[np.arange(k), proposed].mean())
    return float(np.minimum(p[:k], q).sum(axis=-1).mean())
