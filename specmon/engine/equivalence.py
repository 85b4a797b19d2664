"""Is speculative output still what plain decoding gives? And if not, was it a near-tie?"""

from __future__ import annotations

from specmon.events.schema import Equivalence


def compare(
    plain: list[int], plain_margins: list[float], speculative: list[int], greedy: bool, near_tie_margin: float
) -> Equivalence:
    """Under greedy decoding the two must match token for token.

    A divergence where plain decoding's top-1 and top-2 logits were closer than
    `near_tie_margin` is a near-tie (kernels rounding apart), anything else a failure.
    """
    if not greedy:
        return Equivalence("sampled", near_tie_margin=near_tie_margin)
    if plain == speculative:
        return Equivalence("identical", near_tie_margin=near_tie_margin)
    index = next((i for i, (a, b) in enumerate(zip(plain, speculative)) if a != b), min(len(plain), len(speculative)))
    margin = plain_margins[index] if index < len(plain_margins) else None
    verdict = "near-tie" if margin is not None and margin < near_tie_margin else "diverged"
    return Equivalence(verdict, first_divergence=index, margin=margin, near_tie_margin=near_tie_margin)
