"""Recompute every decision of a logged session from the very rounds (or, a proxy's routing
decisions, the very requests) it cites."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from specmon.errors import SpecmonError
from specmon.events.log import LogDamaged, read_log
from specmon.events.schema import Decision, PromptFinished, PromptStarted, RequestTimed, RoundVerified
from specmon.metrics.format import count, ratio_interval
from specmon.metrics.served import CLOCK_WORDS
from specmon.policy import gate, route


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
    drafts: dict[int, gate.Draft] = {}
    shadows = gate.Shadows()  # cut drafts, settled by the rounds after them, as the scheduler settled them
    requests: dict[str, RequestTimed] = {}
    decisions: list[Decision] = []
    try:
        for ev in read_log(path):
            if isinstance(ev, RoundVerified):
                drafts[ev.round_id] = gate.Draft.of(ev)
                if (settled := shadows.settle(ev)) is not None:
                    drafts[settled.round_id] = settled
            elif isinstance(ev, PromptStarted):
                shadows.drop(ev.prompt_id)
            elif isinstance(ev, PromptFinished) and (settled := shadows.close(ev.prompt_id)) is not None:
                drafts[settled.round_id] = settled
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
    retired = [d.decision_id for d in decisions if d.rule is None]
    if retired:
        raise SpecmonError(
            f"{path}: {count(len(retired), 'decision')} made by a rule specmon has retired (first: {retired[0]}); "
            "the log still replays, but only a log of this version's rules can be explained"
        )
    return [explain_route(d, requests) if d.route is not None else explain_gate(d, drafts) for d in decisions]


def what_changed(d: Decision) -> str:
    """A decision's change in words: the side, or speculation, k and the shortest match that drafts
    where they moved, then what the new table verifies of a whole draft."""
    if d.route is not None:
        return f"routed {d.route.side_from}->{d.route.side_to}"
    on_off = {True: "on", False: "off"}
    parts = [f"speculation {on_off[d.speculate_from]}->{on_off[d.speculate_to]}"] * (d.speculate_from != d.speculate_to)
    parts += [f"k {d.k_from}->{d.k_to}"] * (d.k_from != d.k_to)
    parts += [f"drafts from a match of {d.match_from}->{d.match_to}"] * (d.match_from != d.match_to)
    return ", ".join([*parts, d.reason] if d.reason else parts) or "no change recorded"


MOVE = re.compile(r"\S+ [^\s,]+->[^\s,]+")  # `4: 6->2`, `k 8->2`, `routed spec->plain`: what moved, and how


def moves(change: str) -> list[str]:
    """The moves in what_changed's words, each a phrase a wrapped line keeps whole (never `4:` at a
    line's end and `6->2` on the next)."""
    return MOVE.findall(change)


def explain_route(d: Decision, requests: dict[str, RequestTimed]) -> Explanation:
    """A proxy's routing decision: the estimate over the requests it cites (and the replies of earlier
    sessions it cites with their figures: this log holds no request of them), drawn again, and the
    side the rule takes from it."""
    c = d.route
    missing = [rid for rid in d.request_ids if rid not in requests]
    if missing:
        return Explanation(d, False, f"{count(len(missing), 'cited request')} not in the log (first: {missing[0]})")
    cited = [requests[rid] for rid in d.request_ids]
    estimated = cited + [route.stored_request(r, d.prompt_class) for r in c.recalled]
    if c.clock not in CLOCK_WORDS:  # an older log's decision reads as on the server's clock (the default)
        return Explanation(d, False, f"timed on a clock this specmon does not know ({c.clock!r})")
    untimed = [r.request_id for r in estimated if not route.timed(r, c.clock)]
    if untimed:
        return Explanation(d, False, f"cited request {untimed[0]} is not timed on {CLOCK_WORDS[c.clock]}")
    spec, plain = ([r for r in estimated if r.upstream == side] for side in (route.SPEC, route.PLAIN))
    est = route.estimate(spec, plain, c.clock)
    side = route.choose(c.side_from, est, c.min_requests)
    if side != c.side_to:
        return Explanation(d, False, f"recomputed: {c.side_from} -> {side} (logged {c.side_to})")
    if off := _differs({"ratio": (c.ratio, est.ratio), "low": (c.low, est.low), "high": (c.high, est.high)}):
        return Explanation(d, False, off)
    return Explanation(
        d,
        True,
        f"{c.side_from} -> {side}: spec/plain {ratio_interval(est.ratio, est.low, est.high, 3)} from "
        f"{count(est.prompts_spec, 'spec request')} and {count(est.prompts_plain, 'plain request')} "
        f"{route.borrowed_words(d.prompt_class, cited)}{route.stored_words(c.recalled)}on {CLOCK_WORDS[c.clock]}",
    )


def _differs(figures: dict[str, tuple], spec: str = "") -> str:
    """The first figure the log and the recomputation disagree on, in words ("" where none)."""
    for name, (logged, again) in figures.items():
        if not (logged is again if logged is None or again is None else math.isclose(logged, again, rel_tol=1e-9)):
            return f"inputs differ: {name} logged {logged:{spec}}, recomputed {again:{spec}}"
    return ""


def explain_gate(d: Decision, drafts: dict[int, gate.Draft]) -> Explanation:
    """A gate decision drawn again from the rounds it cites and the rule's inputs it logged."""
    g = d.gate
    missing = [rid for rid in d.round_ids if rid not in drafts]
    if missing:
        return Explanation(d, False, f"{count(len(missing), 'cited round')} not in the log (first: {missing[0]})")
    cited = [drafts[rid] for rid in d.round_ids]
    own = gate.counts_of([x for x in cited if x.prompt_class == d.prompt_class])
    recall = g.recalled  # an earlier session's evidence, as the decision cites it: the log holds no rounds of it
    rate = gate.rates(own, gate.counts_of(cited), g.prior, recall, g.prior_weight, g.shared_weight)
    table = gate.cut_table(rate, g.steps, g.min_gain)
    speculate, k, match = gate.summary(table, g.positional, g.min_match)
    if (speculate, k, match, gate.kept(table)) != (d.speculate_to, d.k_to, d.match_to, g.kept_to):
        return Explanation(d, False, f"recomputed: speculate={speculate} k={k} from match {match}")
    figures = {f"rate at reach bucket {b}": (r, again) for b, (r, again) in enumerate(zip(g.rates, rate))}
    figures |= {f"positions tried at bucket {b}": (n, again) for b, (n, again) in enumerate(zip(g.tried, own.tried))}
    if off := _differs(figures, ".6g"):
        return Explanation(d, False, off)
    stored = ""
    if recall and recall.rounds:
        stored += f" and {count(recall.rounds, 'round')} of session {recall.session_id} (stored)"
    if recall and recall.pool_tried != recall.tried:
        stored += " and what the other classes learned in earlier sessions"
    return Explanation(d, True, f"the same table from {count(len(cited), 'round')}{stored}")
