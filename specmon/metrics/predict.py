"""The speedup the measured acceptance predicts (Leviathan et al. 2023, eq. 1), break-even, and
the sweep's prediction from the measured proposal mix (below).

predicted tokens per round = (1 - α^(k+1)) / (1 - α)
predicted speedup          = predicted tokens per round / (k·c + v(k))
  c    = one draft step's time / one plain target step's time
  v(k) = time to verify k+1 positions / one plain target step's time
A gap between measured and predicted speedup shows where overhead, not acceptance, decides."""

from __future__ import annotations

from collections import defaultdict


def tokens_per_round(alpha: float, k: int) -> float:
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def break_even_alpha(k: int, c: float, v: float) -> float | None:
    """Smallest α at which speculation at k pays (predicted speedup ≥ 1); None if even α = 1 loses."""
    cost = k * c + v
    if tokens_per_round(1.0, k) < cost:
        return None
    if tokens_per_round(0.0, k) >= cost:
        return 0.0  # α = 0 already pays: exactly 0, so a measured 0.00 pays too (bisection stops above it)
    low, high = 0.0, 1.0
    for _ in range(60):  # bisection: tokens_per_round rises with α
        mid = (low + high) / 2
        if tokens_per_round(mid, k) >= cost:
            high = mid
        else:
            low = mid
    return high


# -- the prediction from what a sweep measured -------------------------------------------------
# Eq. 1 assumes every round proposes k tokens. An n-gram drafter often proposes fewer or none,
# so the sweep predicts from the measured mix instead:
#   tokens per round = 1 + Σ_i P(L > i)·a_i     L: tokens proposed, a_i: per-position acceptance
#   round ms         = draft ms + overhead ms + Σ_l P(L = l)·v(l)·step
#   v(l)             = verify ms of l+1 positions / verify ms of 1, pooled over the whole sweep
#   step             = the class's plain verify ms (its context length sets it)
# With a_i measured on the same rounds the token term equals the measured mean accepted
# length + 1, so what the prediction tests is the cost side: verify cost by proposal length.

MIN_ROUNDS = 50  # a cell with fewer rounds is too noisy to judge the prediction by
TOLERANCE = 0.15  # a cell whose measured speedup is further off than this is flagged


def mix_tokens_per_round(proposal_share: list[float], per_position: list[float]) -> float:
    """1 + Σ_i P(L > i)·a_i; proposal_share[i] = P(L > i) over all rounds, empty ones included."""
    return 1.0 + sum(share * a for share, a in zip(proposal_share, per_position))


def verify_cost_by_len(rounds) -> dict[int, float]:
    """v(l): mean verify ms of rounds that verified l proposed tokens, over mean verify ms at l = 0."""
    by_len: dict[int, list[float]] = defaultdict(list)
    for ev in rounds:
        by_len[len(ev.proposed)].append(ev.verify_ms)
    one = sum(by_len[0]) / len(by_len[0]) if 0 in by_len else 0.0
    return {length: (sum(ms) / len(ms)) / one for length, ms in sorted(by_len.items())} if one else {}


def mix_round_ms(
    length_share: dict[int, float], v: dict[int, float], step_ms: float, draft_ms: float, overhead_ms: float
) -> float | None:
    """draft + overhead + Σ_l P(L = l)·v(l)·step; None if some proposal length has no measured v."""
    if any(length not in v for length in length_share):
        return None
    return draft_ms + overhead_ms + step_ms * sum(share * v[length] for length, share in length_share.items())
