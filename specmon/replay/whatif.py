"""What would another policy have decided on the same logged evidence?

Each prompt keeps the class it had live (the log does not hold prompt texts); a class the other
policy lacks falls to its default class. The logged rounds are fed, in order, to a fresh
PolicyEngine running the other policy; its decisions are compared with the logged ones. When
the other policy would have run a draft length the log never ran, that is reported as missing
evidence: no round is ever invented."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from specmon.events.log import read_log
from specmon.events.schema import Decision, PromptStarted, RoundVerified, SessionStarted, bench_fixed_k
from specmon.policy.engine import PolicyEngine
from specmon.policy.plan import Plan, Schedule
from specmon.policy.schema import Policy, parse_policy


@dataclass
class ClassDiff:
    name: str
    logged: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)
    missing: set[int] = field(default_factory=set)  # k the other policy wanted but the log lacks

    @property
    def differs(self) -> bool:
        return self.logged != self.other


def describe(d: Decision) -> str:
    if d.speculate_from != d.speculate_to:
        return ("on" if d.speculate_to else "off") + f" (k={d.k_to})"
    if d.match_to:
        return f"min_match {d.match_from}->{d.match_to}"
    return f"k {d.k_from}->{d.k_to}"


def _logged_engine(events) -> PolicyEngine | None:
    """The policy the log ran under, to say where it started each class (a lead re-measure at k=0
    is not where a class started)."""
    text = next((e.policy_text for e in events if isinstance(e, SessionStarted) and e.policy_text), "")
    return PolicyEngine(parse_policy(text, "logged policy"), "logged") if text else None


def _start(k: int) -> str:
    return f"start k={k}" if k else "start off"


def what_if(log: Path, other: Policy) -> dict[str, ClassDiff]:
    engine = PolicyEngine(other, "what-if")
    diffs: dict[str, ClassDiff] = {}
    held: dict[str, set[int]] = {}  # draft lengths the log holds, per class
    events = list(read_log(log))
    for ev in events:
        if isinstance(ev, RoundVerified):
            held.setdefault(ev.prompt_class, set()).add(ev.draft_len)
    schedule = Schedule(Plan(0, ""))
    logged = _logged_engine(events)
    beside = False  # inside a bench's fixed-k run: evidence held, but never the policy's to see
    for ev in events:
        if isinstance(ev, PromptStarted):
            beside = bench_fixed_k(ev) is not None
            if beside:
                continue
            first = ev.prompt_class not in diffs
            diff = diffs.setdefault(ev.prompt_class, ClassDiff(ev.prompt_class))
            schedule = engine.start_prompt(ev.prompt_class)
            plan = schedule.plan
            if first:  # where each started is a difference too: "k=7 never run" must not read "differs: no"
                diff.logged.append(_start(logged.start_prompt(ev.prompt_class).plan.k if logged else ev.draft_len))
                diff.other.append(_start(plan.k))
            for wanted in {plan.k, *(plan.lead[:1] if plan.lead else ())}:
                if wanted not in held.get(ev.prompt_class, set()):
                    diff.missing.add(wanted)
        elif isinstance(ev, RoundVerified) and not beside:
            schedule.lead_k()  # count the round against the lead run, as the live session did
            decision = engine.after_round(ev, schedule)
            if decision is not None:
                diffs.setdefault(ev.prompt_class, ClassDiff(ev.prompt_class)).other.append(describe(decision))
        elif isinstance(ev, Decision):
            diffs.setdefault(ev.prompt_class, ClassDiff(ev.prompt_class)).logged.append(describe(ev))
    return diffs
