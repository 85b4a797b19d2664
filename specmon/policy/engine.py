"""The policy at run time: classify prompts, cut each draft to the length worth verifying, learn
each class's acceptance from its rounds, and decide (gate.py) from that and the engine's costs.

A class's decision is its cut table: for a draft after a match of m tokens, how many of its
tokens to verify (none: a plain step). Every class's table is recomputed every CHECK_EVERY drafting
rounds of the session (a class starts from the session's rates, so another class's rounds move it
too), and a change is a Decision event citing every round its rates came from. A draft the table
cuts is sometimes verified anyway, within the class's exploration budget (explore.py).

With a memory shelf (memory.store), what each class learned in earlier sessions tops up its own
evidence (gate.top_up) from the first round: a class whose stored evidence changes its first table
is decided at once, citing that session, and every decision while the stored evidence counts cites
it too. What the classes learn is kept there as the session goes and when it ends."""

from __future__ import annotations

import collections
import itertools
import time
from dataclasses import dataclass, field

import msgspec

from specmon.engine.costs import Costs
from specmon.events.schema import ClassInForce, Decision, GateChoice, PolicyLoaded, Recall, RoundVerified
from specmon.memory.store import Shelf, age_weight
from specmon.policy import gate
from specmon.policy.explore import Budget
from specmon.policy.classify import classify, matches_of, named_class
from specmon.policy.reload import Edit, PolicyWatch, loaded_event
from specmon.policy.schema import Policy, PromptClass


class Learned(msgspec.Struct):
    """What a class learned, as stored: positions tried and accepted per reach bucket."""

    tried: list[float]
    taken: list[float]
    rounds: int  # drafts behind it: verified, or cut and settled (gate.Shadow)
    session_id: str  # the session that learned it
    t: float  # when
    matches: str  # the class's match rules (matches_of): evidence of other prompts is not read


@dataclass
class ClassState:
    window: collections.deque  # the class's recent drafting rounds (gate.Draft)
    table: gate.Table  # the cut table in force (advised, in advise mode)
    counts: gate.Counts = field(default_factory=gate.Counts)
    budget: Budget = field(default_factory=Budget)  # what verifying cut drafts may still cost
    stored: Learned | None = None  # what an earlier session learned of the class (memory.store)


class PolicyEngine:
    def __init__(self, policy: Policy, session_id: str, costs: Costs, shelf: Shelf | None = None):
        self.policy, self.session_id, self.costs, self.shelf = policy, session_id, costs, shelf
        self.states: dict[str, ClassState] = {}
        self._steps: dict[int, tuple[float, ...]] = {}  # steps() per draft length
        recalled = shelf.recall(dict[str, Learned]) if shelf is not None else None
        self.stored: dict[str, Learned] = recalled.body if recalled is not None else {}
        self.shared = gate.Counts()  # every class's windows together: a new class starts from these
        self.decision_ids = itertools.count()
        self.fresh = 0  # drafting rounds of the session since every class's table was computed
        self.positional = costs.draft_ms > 0  # a model drafter: its tokens cost, and it reports no match
        self.prior = gate.PRIOR_POSITIONAL if self.positional else gate.PRIOR
        self.watch = PolicyWatch(policy)
        self.in_force()  # every class's first table, drawn now: from the prior alone, wherever it is read
        for c in policy.classes if self.stored else ():
            self.state(c.name)  # each with its stored evidence, which counts toward every class's
        # a class whose stored evidence moves it from there is decided before its first round
        auto = [c.name for c in policy.classes if c.speculate == "auto"] if self.stored else []
        self.opening = [d for name in auto if (d := self.decide(name))]

    # -- classes -----------------------------------------------------------------------------
    def classify(self, text: str, tag: str | None = None, named: str | None = None) -> tuple[str, str]:
        """(class, the rule that said so): the class a request `named`, else the first whose match takes the text."""
        return named_class(self.policy, named) if named is not None else classify(self.policy, text, tag)

    def state(self, name: str) -> ClassState:
        if name not in self.states:
            cls = self.policy.class_named(name)
            rate = gate.rates(gate.Counts(), self.shared, self.prior)
            stored = self.stored.get(name) if cls.speculate == "auto" else None
            stored = stored if stored is not None and stored.matches == matches_of(cls) else None
            table = gate.cut_table(rate, self.steps(cls), self.policy.settings.min_gain)
            self.states[name] = ClassState(collections.deque(), table, stored=stored)
        return self.states[name]

    def steps(self, cls: PromptClass) -> tuple[float, ...]:
        """A round's cost in plain steps for a draft of j = 0..k tokens, from the measured curve."""
        if cls.draft_len not in self._steps:  # read every round: the curve is fixed for the session
            self._steps[cls.draft_len] = tuple(self.costs.steps(j) for j in range(cls.draft_len + 1))
        return self._steps[cls.draft_len]

    def _gated(self, cls: PromptClass) -> bool:
        return cls.speculate == "auto" and self.policy.settings.mode == "enforce"

    # -- each round --------------------------------------------------------------------------
    def draft_len(self, name: str) -> int:
        """k asked of the drafter for this class's next round: off 0; on its draft_len; auto, a
        free drafter (n-gram) its draft_len, cut once its match is known; a model drafter, whose
        tokens cost, the longest draft the table verifies."""
        cls = self.policy.class_named(name)
        if cls.speculate == "off":
            return 0
        if not self._gated(cls) or not self.costs.draft_ms:
            return cls.draft_len
        st = self.state(name)
        # a model drafter cut off is asked only for the draft its budget would verify
        return gate.summary(st.table, True)[1] or st.budget.afford(self.steps(cls), cls.draft_len)

    def cut(self, name: str, matched: int, proposed: int) -> tuple[int, bool]:
        """Tokens of a draft to verify, and whether they are explored (verified though the table cut them)."""
        cls = self.policy.class_named(name)
        if not self._gated(cls) or not proposed:
            return proposed, False
        st = self.state(name)
        row = st.table[min(matched, gate.MAX_REACH)]
        keep = row[min(proposed, len(row) - 1)]
        if keep or gate.summary(st.table, self.positional)[0]:
            return keep, False  # a class still drafting after some matches learns from those
        steps = self.steps(cls)
        explored = st.budget.afford(steps, proposed)
        if explored:
            st.budget.balance -= steps[explored] - 1
        return explored, explored > 0

    def observe(self, ev: RoundVerified, shadows: gate.Shadows) -> list[Decision]:
        """Take a round of a prompt whose cut drafts `shadows` checks: it earns its class's
        exploration budget (an explored one gives back what it had accepted) and, if it drafted or
        settled a cut draft, is evidence; every class's table is recomputed when due."""
        cls = self.policy.class_named(ev.prompt_class)
        if cls.speculate != "auto":
            return []
        st = self.state(ev.prompt_class)
        if self._gated(cls):
            cap = self.steps(cls)[-1] - 1
            st.budget.earn(self.policy.settings.explore_budget + (ev.accepted if ev.explored else 0), cap)
        decisions = self._learn(gate.Draft.of(ev)) if ev.proposed else []
        settled = shadows.settle(ev)
        return decisions + self._learn(settled) if settled is not None else decisions

    def close(self, shadows: gate.Shadows, prompt_id: str) -> list[Decision]:
        """A prompt finished: what its cut draft still being checked had matched is evidence."""
        settled = shadows.close(prompt_id)
        auto = settled is not None and self.policy.class_named(settled.prompt_class).speculate == "auto"
        return self._learn(settled) if auto else []

    def _learn(self, draft: gate.Draft) -> list[Decision]:
        st = self.state(draft.prompt_class)
        if len(st.window) >= self.policy.settings.window:
            old = st.window.popleft()
            st.counts.add(old, -1)
            self.shared.add(old, -1)
        st.window.append(draft)
        st.counts.add(draft)
        self.shared.add(draft)
        self.fresh += 1
        if self.fresh < gate.CHECK_EVERY:
            return []
        self.fresh = 0
        decided = (self.decide(name) for name in list(self.states) if self.policy.class_named(name).speculate == "auto")
        return [d for d in decided if d is not None]

    def decide(self, name: str) -> Decision | None:
        cls, st = self.policy.class_named(name), self.state(name)
        recall = self._recall(name)
        rate, steps = gate.rates(st.counts, self.shared, self.prior, recall), self.steps(cls)
        table = gate.cut_table(rate, steps, self.policy.settings.min_gain)
        if table == st.table:
            return None
        before, after = gate.summary(st.table, self.positional), gate.summary(table, self.positional)
        choice = GateChoice(
            rates=rate,
            tried=list(st.counts.tried),
            taken=list(st.counts.taken),
            steps=list(steps),
            prior=list(self.prior),
            prior_weight=gate.PRIOR_WEIGHT,
            shared_weight=gate.SHARED_WEIGHT,
            min_gain=self.policy.settings.min_gain,
            min_match=gate.MIN_MATCH,
            positional=self.positional,
            curve_disturbed=self.costs.disturbed,  # the host's state while the steps were timed
            kept_from=gate.kept(st.table),
            kept_to=gate.kept(table),
            recalled=recall,
        )
        st.table = table
        return Decision(
            session_id=self.session_id,
            t=time.time(),
            decision_id=next(self.decision_ids),
            prompt_class=name,
            speculate_from=before[0],
            speculate_to=after[0],
            k_from=before[1],
            k_to=after[1],
            rule_key="policy.min_gain",
            rule_line=self.policy.line_of("policy", "min_gain"),
            round_ids=sorted(d.round_id for s in self.states.values() for d in s.window),
            applied=self.policy.settings.mode == "enforce",
            policy_sha256=self.policy.sha256,
            reason=gate.changes(choice.kept_from, choice.kept_to),
            match_from=before[2],
            match_to=after[2],
            rule=choice,
        )

    # -- memory across sessions ------------------------------------------------------------------
    def _top_up(self, st: ClassState) -> tuple[list[float], list[float]] | None:
        """The stored positions a class's estimate takes now (gate.top_up), None where it takes none."""
        if st.stored is None:
            return None
        tried, taken = gate.top_up(st.stored.tried, st.stored.taken, st.counts, age_weight(st.stored.t))
        return (tried, taken) if any(tried) else None

    def _recall(self, name: str) -> Recall | None:
        """What a decision of class `name` takes from the store: its own, and every class's for the session's."""
        ups = {n: up for n, st in self.states.items() if (up := self._top_up(st))}
        if not ups:
            return None
        zero = [0.0] * gate.BUCKETS
        pool_tried, pool_taken = ([sum(col) for col in zip(zero, *lists)] for lists in zip(*ups.values()))
        tried, taken = ups.get(name, (zero, zero))
        stored = self.states[name].stored
        session_id, rounds = (stored.session_id, stored.rounds) if name in ups else ("", 0)
        return Recall(session_id, rounds, tried, taken, pool_tried, pool_taken)

    def learned(self) -> dict[str, Learned]:
        """What to store: a class that drafted this session, its own window and the stored evidence it
        still takes (so older evidence fades as it is carried on); any other class as it was stored."""
        out, now = dict(self.stored), time.time()
        for name, st in self.states.items():
            if not st.window:
                continue
            up = self._top_up(st)
            own = st.counts.plus(*up) if up else st.counts
            rounds = len(st.window) + (st.stored.rounds if up else 0)
            tried, taken = list(map(float, own.tried)), list(map(float, own.taken))
            out[name] = Learned(tried, taken, rounds, self.session_id, now, matches_of(self.policy.class_named(name)))
        return out

    def remember(self, final: bool = False) -> None:
        """Replace the store with what the classes have learned, when the shelf says it is due (Shelf.due)."""
        if self.shelf is not None and self.shelf.due(final) and any(st.window for st in self.states.values()):
            self.shelf.keep(self.session_id, self.learned())

    # -- the policy in force and hot reload ----------------------------------------------------
    def in_force(self) -> list[ClassInForce]:
        """Every class as its next prompt will run: on/off, its longest draft, the shortest match that drafts."""
        return [self.class_in_force(c.name) for c in self.policy.classes]

    def class_in_force(self, name: str) -> ClassInForce:
        c = self.policy.class_named(name)
        if self._gated(c):
            return ClassInForce(c.name, *gate.summary(self.state(name).table, self.positional))
        return ClassInForce(c.name, c.speculate != "off", c.draft_len if c.speculate != "off" else 0, 0)

    def maybe_reload(self) -> PolicyLoaded | None:
        """If the file changed: a valid edit takes over now (called between prompts, so each class
        runs by it from its next prompt), an invalid one is refused and reported. A class whose
        table changed starts again from the file, its evidence dropped (the rounds gathered under
        the old table measured another class); the others keep what they learned."""
        edit = self.watch.edit(self.policy, self.session_id)
        if not isinstance(edit, Edit):
            return edit
        self.policy = edit.policy
        sections = [s for s in edit.sections if s == "policy"]  # [routing] is the proxy's: no class here runs by it
        for name in list(self.states) if sections else edit.classes:
            st = self.states.pop(name, None)
            self.stored.pop(name, None)  # learned under the class as it was
            for draft in st.window if st is not None else ():
                self.shared.add(draft, -1)
        return loaded_event(edit.policy, self.session_id, self.in_force(), edit.classes + sections)
