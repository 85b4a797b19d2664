"""Recompute every decision of a logged session from the very rounds it cites."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from specmon.errors import SpecmonError
from specmon.events.log import LogDamaged, read_log
from specmon.events.schema import Decision, RoundVerified
from specmon.policy.decide import Row, decide
from specmon.policy.match import decide_match


@dataclass
class Explanation:
    decision: Decision
    reproduces: bool
    detail: str


def explain_log(path: Path, decision_id: int | None = None,
                on_damage: Callable[[LogDamaged], None] | None = None) -> list[Explanation]:
    """Every decision in the log, or the one asked for: a SpecmonError says which ids there are.
    With `on_damage`, a damaged log (cut short, a bad frame) is explained up to the damage, which
    is handed to it; without, the damage is raised."""
    rows: dict[int, Row] = {}
    decisions: list[Decision] = []
    try:
        for ev in read_log(path):
            if isinstance(ev, RoundVerified):
                rows[ev.round_id] = Row.of(ev)
            elif isinstance(ev, Decision):
                decisions.append(ev)
    except LogDamaged as exc:
        if on_damage is None:
            raise
        on_damage(exc)
    if decision_id is not None:
        if not decisions:
            raise SpecmonError(f"{path} holds no policy decisions")
        ids = [d.decision_id for d in decisions]
        decisions = [d for d in decisions if d.decision_id == decision_id]
        if not decisions:
            raise SpecmonError(f"no decision {decision_id} in {path} (it has {min(ids)}..{max(ids)})")
    return [explain(d, rows) for d in decisions]


def explain(d: Decision, rows: dict[int, Row]) -> Explanation:
    missing = [rid for rid in d.round_ids if rid not in rows]
    if missing:
        return Explanation(d, False, f"{len(missing)} cited rounds are not in the log (first: {missing[0]})")
    rule = decide_match if d.thresholds.get("match") else decide
    outcome = rule(d.speculate_from, d.k_from, [rows[rid] for rid in d.round_ids], d.thresholds)
    if outcome is None:
        return Explanation(d, False, "the cited rounds call for no change")
    if (outcome.speculate, outcome.k, outcome.match) != (d.speculate_to, d.k_to, d.match_to):
        return Explanation(d, False, f"recomputed: speculate={outcome.speculate} k={outcome.k}"
                                     + (f" min_match={outcome.match}" if outcome.match else ""))
    off = [key for key, value in d.inputs.items()
           if not math.isclose(outcome.inputs.get(key, math.nan), value, rel_tol=1e-9)]
    if off:
        return Explanation(d, False, f"inputs differ: {off[0]} logged {d.inputs[off[0]]:.6g}, "
                                     f"recomputed {outcome.inputs.get(off[0], math.nan):.6g}")
    return Explanation(d, True, f"ratio {outcome.inputs['ratio']:.3f} from {len(d.round_ids)} rounds")
