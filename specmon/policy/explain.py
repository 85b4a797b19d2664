"""Recompute every decision of a logged session from the very rounds (or, a proxy's routing
decisions, the very requests) it cites."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from specmon.errors import SpecmonError
from specmon.events.log import LogDamaged, read_log
from specmon.events.schema import Decision, RequestTimed, RoundVerified
from specmon.metrics.format import count
from specmon.policy import gate, route
from specmon.policy.legacy import Row, decide, decide_match


@dataclass
class Explanation:
    decision: Decision
    reproduces: bool
    detail: str


def explain_log(
    path: Path, decision_id: int | None = None, on_damage: Callable[[LogDamaged], None] | None = None
) -> list[Explanation]:
    """Every decision in the log, or the one asked for: a SpecmonError says which ids there are.
    With `on_damage`, a damaged log (cut short, a bad frame) is explained up to the damage, which
    is handed to it; without, the damage is raised."""
    rows: dict[int, tuple[Row, gate.Draft]] = {}
    requests: dict[str, RequestTimed] = {}
    decisions: list[Decision] = []
    try:
        for ev in read_log(path):
            if isinstance(ev, RoundVerified):
                rows[ev.round_id] = (Row.of(ev), gate.Draft.of(ev))
            elif isinstance(ev, RequestTimed):
                requests[ev.request_id] = ev
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
    return [explain_route(d, requests) if d.route is not None else explain(d, rows) for d in decisions]


def explain_route(d: Decision, requests: dict[str, RequestTimed]) -> Explanation:
    """A proxy's routing decision: the estimate over the requests it cites, drawn again, and the
    side the rule takes from it."""
    c = d.route
    missing = [rid for rid in d.request_ids if rid not in requests]
    if missing:
        return Explanation(d, False, f"{count(len(missing), 'cited request')} not in the log (first: {missing[0]})")
    cited = [requests[rid] for rid in d.request_ids]
    est = route.estimate(
        [r for r in cited if r.upstream == route.SPEC], [r for r in cited if r.upstream == route.PLAIN]
    )
    side = route.choose(c.side_from, est, c.min_requests)
    if side != c.side_to:
        return Explanation(d, False, f"recomputed: {c.side_from} -> {side} (logged {c.side_to})")
    figures = {"ratio": (c.ratio, est.ratio), "low": (c.low, est.low), "high": (c.high, est.high)}
    off = [name for name, (logged, again) in figures.items() if not _same(logged, again)]
    if off:
        logged, again = figures[off[0]]
        return Explanation(d, False, f"inputs differ: {off[0]} logged {logged}, recomputed {again}")
    interval = "" if est.low is None else f" [{est.low:.2f}, {est.high:.2f}]"
    return Explanation(
        d,
        True,
        f"{c.side_from} -> {side}: spec/plain {est.ratio:.3f}x{interval} from "
        f"{count(est.prompts_spec, 'spec request')} and {count(est.prompts_plain, 'plain request')}",
    )


def _same(logged: float | None, again: float | None) -> bool:
    if logged is None or again is None:
        return logged is again
    return math.isclose(logged, again, rel_tol=1e-9)


def explain(d: Decision, rows: dict[int, tuple[Row, gate.Draft]]) -> Explanation:
    missing = [rid for rid in d.round_ids if rid not in rows]
    if missing:
        return Explanation(d, False, f"{count(len(missing), 'cited round')} not in the log (first: {missing[0]})")
    if d.thresholds.get("gate"):
        return explain_gate(d, [rows[rid][1] for rid in d.round_ids])
    rule = decide_match if d.thresholds.get("match") else decide
    outcome = rule(d.speculate_from, d.k_from, [rows[rid][0] for rid in d.round_ids], d.thresholds)
    if outcome is None:
        return Explanation(d, False, "the cited rounds call for no change")
    if (outcome.speculate, outcome.k, outcome.match) != (d.speculate_to, d.k_to, d.match_to):
        return Explanation(
            d,
            False,
            f"recomputed: speculate={outcome.speculate} k={outcome.k}"
            + (f" min_match={outcome.match}" if outcome.match else ""),
        )
    off = [
        key
        for key, value in d.inputs.items()
        if not math.isclose(outcome.inputs.get(key, math.nan), value, rel_tol=1e-9)
    ]
    if off:
        return Explanation(
            d,
            False,
            f"inputs differ: {off[0]} logged {d.inputs[off[0]]:.6g}, "
            f"recomputed {outcome.inputs.get(off[0], math.nan):.6g}",
        )
    return Explanation(d, True, f"ratio {outcome.inputs['ratio']:.3f} from {count(len(d.round_ids), 'round')}")


def explain_gate(d: Decision, drafts: list[gate.Draft]) -> Explanation:
    """A decision of the live rule: the class's acceptance by reach from its cited rounds (and
    the session's from all of them), its cut table from the costs it logged, and that table's
    summary against the decision's."""
    t = d.thresholds
    constants = ([t[f"prior_b{b}"] for b in range(gate.BUCKETS)], t["prior_weight"], t["shared_weight"])
    own = gate.counts_of([x for x in drafts if x.prompt_class == d.prompt_class])
    rate = gate.rates(own, gate.counts_of(drafts), *constants)
    steps = _steps(t)
    table = gate.cut_table(rate, steps, t["min_gain"])
    speculate, k, match = gate.summary(table, bool(t.get("positional")), int(t.get("min_match", 1)))
    if (speculate, k, match) != (d.speculate_to, d.k_to, d.match_to):
        return Explanation(d, False, f"recomputed: speculate={speculate} k={k} from match {match}")
    logged = {f"rate_b{b}": r for b, r in enumerate(rate)} | {f"tried_b{b}": float(n) for b, n in enumerate(own.tried)}
    off = [key for key, value in d.inputs.items() if not math.isclose(logged.get(key, math.nan), value, rel_tol=1e-9)]
    if off:
        return Explanation(
            d,
            False,
            f"inputs differ: {off[0]} logged {d.inputs[off[0]]:.6g}, recomputed {logged.get(off[0], math.nan):.6g}",
        )
    return Explanation(d, True, f"k={k}, drafts from a {match}-token match, from {count(len(drafts), 'round')}")


def _steps(thresholds: dict[str, float]) -> list[float]:
    """The round costs a decision logged: steps_0, steps_1, ... in plain steps."""
    steps, j = [], 0
    while f"steps_{j}" in thresholds:
        steps.append(thresholds[f"steps_{j}"])
        j += 1
    return steps
