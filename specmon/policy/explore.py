"""Exploration: a class whose table cuts its drafts keeps learning, at a bounded cost.

Without it a class cut off stays plain however its prompts change: a cut draft is never verified,
so it is no evidence. Each round of the class earns `explore_budget` of a plain step; a draft the
table cuts is verified anyway, as far as the balance covers its cost past a plain step if none of
it were accepted (steps(j) - 1), and each token it had accepted is given back (a plain step it
saved). Where nothing pays, exploration costs at most explore_budget of the class's time; where
drafts pay again, the refunds buy longer drafts and the table reopens within a few prompts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass
class Budget:
    """Plain steps a class may still lose to exploring: a verified cut draft spends its cost past a plain step."""

    balance: float = 0.0

    def earn(self, steps: float, cap: float) -> None:
        """Add `steps` (a round's share, or a refund), up to `cap`: one whole draft's cost, so
        luck buys a full draft, not a spree."""
        self.balance = min(self.balance + steps, cap)

    def afford(self, steps: Sequence[float], proposed: int) -> int:
        """The longest draft, up to `proposed` tokens, the balance pays for were none accepted (0: none).
        steps[j]: a round verifying j tokens, in plain steps."""
        j = 0
        while j < min(proposed, len(steps) - 1) and steps[j + 1] - 1 <= self.balance:
            j += 1
        return j
