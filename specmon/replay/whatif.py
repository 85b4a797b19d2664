"""What would another policy have decided on the same logged evidence?

Each prompt keeps the class it had live (the log does not hold prompt texts); a class the other
policy lacks falls to its default class. The logged drafting rounds are fed, in order, to a fresh
PolicyEngine running the other policy at the costs the log measured; its decisions are compared
with the logged ones. Where the other policy allows longer drafts than the log ever verified,
that is reported as missing evidence: no round is ever invented."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from specmon.engine.costs import Costs
from specmon.errors import SpecmonError
from specmon.events.log import read_log
from specmon.events.schema import Decision, PromptFinished, PromptStarted, RoundVerified, SessionStarted, bench_fixed_k
from specmon.policy import gate
from specmon.policy.engine import PolicyEngine
from specmon.policy.schema import Policy
from specmon.replay.tune import cost_of, fitted_costs


@dataclass
class ClassDiff:
    logged: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)
    missing: set[int] = field(default_factory=set)  # draft lengths the other policy allows but the log never verified


def describe(d: Decision) -> str:
    if d.route is not None:
        return f"→{d.route.side_to}"
    if not d.speculate_to:
        return "off"
    return f"k={d.k_to} from a {d.match_to}-token match" if d.match_to else f"k={d.k_to}"


def logged_costs(events) -> Costs:
    """The costs the log measured at load; in an older log, as `policy tune` fits them on its rounds."""
    header = next((e for e in events if isinstance(e, SessionStarted)), None)
    if header is not None and header.verify_ms:
        return Costs(tuple(header.verify_ms), header.draft_ms)
    fitted = fitted_costs([e for e in events if isinstance(e, RoundVerified)])
    if not fitted:
        return Costs((1.0, 1.0))  # too few rounds to fit: every pass priced as a plain step
    cost = cost_of(fitted)
    return Costs(tuple(cost(n) for n in range(max(fitted) + 1)))


def what_if(log: Path, other: Policy) -> dict[str, ClassDiff]:
    events = list(read_log(log))
    engine = PolicyEngine(other, "what-if", logged_costs(events))
    diffs: dict[str, ClassDiff] = {}
    longest: dict[str, int] = {}  # the longest draft the log verified, per class
    beside = False  # inside a bench's fixed-k run: evidence held, but never the policy's to see
    shadows = gate.Shadows()  # the drafts the live table cut whole (another table would cut others: unseen)
    for ev in events:
        decided: list[Decision] = []
        if isinstance(ev, PromptFinished):
            decided = engine.close(shadows, ev.prompt_id)
        elif isinstance(ev, PromptStarted):
            shadows.drop(ev.prompt_id)
            beside = bench_fixed_k(ev) is not None
            diffs.setdefault(ev.prompt_class, ClassDiff())
        elif isinstance(ev, RoundVerified) and not beside:
            longest[ev.prompt_class] = max(longest.get(ev.prompt_class, 0), len(ev.proposed))
            decided = engine.observe(ev, shadows)
        elif isinstance(ev, Decision):
            if ev.rule is None:
                raise SpecmonError(
                    f"{log}: decision {ev.decision_id} was made by a rule specmon has retired; the log still "
                    "replays, but what-if compares only with this version's rules"
                )
            diffs.setdefault(ev.prompt_class, ClassDiff()).logged.append(describe(ev))
        for decision in decided:
            diffs.setdefault(decision.prompt_class, ClassDiff()).other.append(describe(decision))
    for name, diff in diffs.items():
        allowed = engine.policy.class_named(name).draft_len
        if allowed > longest.get(name, 0):
            diff.missing.add(allowed)
    return diffs
