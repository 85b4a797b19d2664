"""Typed policy decisions for tests: a gate decision whose choice is what the live rule would log."""

from __future__ import annotations

from specmon.events.schema import Decision, GateChoice
from specmon.policy import gate


def gate_choice(kept_from: list[int] | None = None, kept_to: list[int] | None = None) -> GateChoice:
    counts = gate.Counts()
    return GateChoice(
        rates=list(gate.PRIOR),
        tried=counts.tried,
        taken=counts.taken,
        steps=[1.0, 1.1, 1.2, 1.3, 1.4],
        prior=list(gate.PRIOR),
        prior_weight=gate.PRIOR_WEIGHT,
        shared_weight=gate.SHARED_WEIGHT,
        min_gain=0.03,
        min_match=gate.MIN_MATCH,
        positional=False,
        curve_disturbed=0,
        kept_from=kept_from or [4] * (gate.MAX_REACH + 1),
        kept_to=kept_to or [4] * (gate.MAX_REACH + 1),
    )


def gate_decision(name: str, k_from: int, k_to: int, decision_id: int = 0, t: float = 0.0, **changes) -> Decision:
    """The class's table moved from verifying k_from to k_to of a whole draft (0: off)."""
    fields = dict(
        session_id="s",
        t=t,
        decision_id=decision_id,
        prompt_class=name,
        speculate_from=k_from > 0,
        speculate_to=k_to > 0,
        k_from=k_from,
        k_to=k_to,
        rule_key="policy.min_gain",
        rule_line=3,
        round_ids=[0],
        applied=True,
        policy_sha256="a" * 64,
        reason=gate.changes([k_from], [k_to]),
        rule=gate_choice([k_from] * (gate.MAX_REACH + 1), [k_to] * (gate.MAX_REACH + 1)),
    )
    return Decision(**(fields | changes))
