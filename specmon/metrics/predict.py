"""The speedup the measured acceptance predicts (Leviathan et al. 2023, eq. 1), and break-even.

predicted tokens per round = (1 - α^(k+1)) / (1 - α)
predicted speedup          = predicted tokens per round / (k·c + v(k))
  c    = one draft step's time / one plain target step's time
  v(k) = time to verify k+1 positions / one plain target step's time
A gap between measured and predicted speedup shows where overhead, not acceptance, decides."""

from __future__ import annotations


def tokens_per_round(alpha: float, k: int) -> float:
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def predicted_speedup(alpha: float, k: int, c: float, v: float) -> float:
    return tokens_per_round(alpha, k) / (k * c + v)


def break_even_alpha(k: int, c: float, v: float) -> float | None:
    """Smallest α at which speculation at k pays (predicted speedup ≥ 1); None if even α = 1 loses."""
    cost = k * c + v
    if tokens_per_round(1.0, k) < cost:
        return None
    low, high = 0.0, 1.0
    for _ in range(60):  # bisection: tokens_per_round rises with α
        mid = (low + high) / 2
        if tokens_per_round(mid, k) >= cost:
            high = mid
        else:
            low = mid
    return high
