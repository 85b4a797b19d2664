"""One prompt's plan (the class's k, with any lead run first) and the count of its rounds against it."""

from __future__ import annotations

from dataclasses import dataclass

from specmon.policy.decide import Row


@dataclass(frozen=True)
class Plan:
    """One prompt's draft lengths: `lead` = (k, rounds) decoded first (a short plain re-measure
    or a probe of another k), then `k` for the rest of the prompt. An `alternate` lead takes
    turns with `k` round by round, so the two are measured on the same text."""

    k: int
    why: str
    lead: tuple[int, int] | None = None
    alternate: bool = False

    def describe(self) -> str:
        if self.lead is None:
            return f"k={self.k}: {self.why}"
        if self.alternate:
            (k, rounds), then = self.lead, self.k
            return f"k={k} and k={then} in turn for {rounds} rounds each, then k={then}: {self.why}"
        return f"k={self.lead[0]} for {self.lead[1]} rounds, then k={self.k}: {self.why}"


class Schedule:
    """Counts one prompt's rounds against its plan's lead run."""

    def __init__(self, plan: Plan, prompt_id: str = ""):
        self.plan = plan
        self.rounds = 0
        self.prompt_id = prompt_id
        self.own: list[Row] = []  # this prompt's rounds at k > 0 after its lead run (policy.prompt_rounds)
        self.judged = False  # its own evidence was judged (once a prompt)
        self.override: bool | None = None  # a prompt decision: on (True) or off (False) for the rest of it
        lead = plan.lead
        self.lead_rounds = 0 if lead is None else lead[1] * (2 if plan.alternate else 1)  # the lead run, in rounds

    def lead_k(self) -> int | None:
        """The lead run's k for the next round, or None (the class's k) outside it."""
        self.rounds += 1
        if self.rounds > self.lead_rounds:
            return None
        if self.plan.alternate and self.rounds % 2 == 0:
            return None
        return self.plan.lead[0]

    def lead_over(self) -> bool:
        return self.rounds >= self.lead_rounds
