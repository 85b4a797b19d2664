"""The policy at run time: classify prompts, plan each prompt's k, gather evidence, decide.

A round that cannot bring a decision only counts down its class's room and is set aside; the
rounds set aside are observed (one append each to a bounded window, evidence.py) together at
the next round that could bring one. A decision is checked every plain_rounds rounds of a class,
so it can take effect in the middle of a prompt."""

from __future__ import annotations

import collections
import time
from pathlib import Path

from specmon.errors import SpecmonError
from specmon.events.schema import ClassInForce, Decision, PolicyLoaded, RoundVerified
from specmon.policy.classify import classify, named_class
from specmon.policy.decide import Row, can_still_pay, decide, decide_grouped, decide_prompt, goodput
from specmon.policy.evidence import EARLY_ROUNDS, ClassState, Evidence
from specmon.policy.match import decide_match, match_rows, stale
from specmon.policy.plan import Plan, Schedule
from specmon.policy.reload import loaded_event, refused_event
from specmon.policy.schema import DraftLen, Policy, PromptClass, file_stamp, load_policy


FAR_AHEAD = 1.25  # speculation this far past the switch-on line: plain drift could hardly flip it


def start_k(cls: PromptClass) -> int:
    k = cls.draft_len
    return k if isinstance(k, int) else (k.start or k.min)


class PolicyEngine(Evidence):
    def __init__(self, policy: Policy, session_id: str):
        super().__init__(policy)
        self.policy = policy
        self._by_name: tuple[Policy, dict[str, PromptClass]] | None = None  # per policy in force: a lookup a round
        self.session_id = session_id
        self.states: dict[str, ClassState] = {}
        self.decisions = 0
        self._mtime = policy.stamp if policy.stamp is not None else file_stamp(policy.source)

    # -- classification and planning -----------------------------------------------------
    def classify(self, text: str, tag: str | None = None, named: str | None = None) -> tuple[str, str]:
        """(class, the rule that said so): the class a request `named` (UnknownClass if there is
        none), else the first class whose match takes the text (or its `tag`)."""
        return named_class(self.policy, named) if named is not None else classify(self.policy, text, tag)

    def state(self, name: str) -> ClassState:
        if name not in self.states:
            cls = self._class(name)
            self.states[name] = ClassState(speculate=cls.speculate != "off", k=start_k(cls))
        return self.states[name]

    def confidence(self, name: str, learned: bool = True) -> tuple[int, int] | None:
        """The n-gram drafter's (min_match, min_seen) for this class's next prompt: the class's,
        with min_match as the policy raised it (never past max_match, nor below the file's own);
        not `learned` (a fixed-k run): as the file sets it."""
        ngram = self._class(name).ngram
        if ngram is None:
            return None
        raised = min(self.state(name).min_match, ngram.max_match) if ngram.max_match and learned else 0
        return max(ngram.min_match, raised), ngram.min_seen

    def plan(self, name: str) -> Plan:
        """This class's next prompt: the policy's k, with a short plain re-measure or a probe of
        another k first when one is due. Measuring in short runs (plain_rounds plain rounds,
        min_rounds at another k), not whole prompts, keeps what learning costs small."""
        cls, st, s = self._class(name), self.state(name), self.policy.settings
        st.prompts += 1
        st.since_plain += 1
        if cls.speculate != "auto":
            return Plan(st.k if cls.speculate == "on" else 0, f"speculate = {cls.speculate}")
        if len(self.plain_rows(st)) < s.plain_rounds:
            if s.silent_plain and st.since_plain <= s.remeasure_every:
                return Plan(st.k, "measuring speculation; its rounds that draft nothing measure plain decoding")
            st.since_plain = 0
            return Plan(st.k, "measuring plain decoding, then speculation", (0, s.plain_rounds))
        st.since_probe += 1
        due = s.probe_every and st.since_probe >= (st.probe_gap or s.probe_every)
        if not st.speculate:
            st.since_plain = 0  # every prompt decodes plainly: the baseline stays fresh
            return self._plan_off(cls, st, due)
        if self._rounds(st, st.k) < s.min_rounds:
            return Plan(st.k, "measuring speculation")
        if s.remeasure_every and st.since_plain >= (st.remeasure_gap or s.remeasure_every):
            fresh = st.silent_since >= s.plain_rounds  # silent rounds kept plain's cost current meanwhile
            st.since_plain, st.silent_since = 0, 0
            if not fresh:
                st.remeasuring = True
                return Plan(st.k, "re-measuring plain decoding", (0, s.plain_rounds))
        short = self._cut_short(cls, st)
        probe = self._next_probe(cls, st, short) if due or short else None
        if probe is not None:
            st.probed[probe] = st.prompts
            st.since_probe, st.probing = 0, True
            rounds = s.min_rounds - short[probe] if probe in short else s.min_rounds
            return Plan(st.k, f"trying k={probe}", (probe, rounds), alternate=True)
        return Plan(st.k, "policy")

    def _plan_off(self, cls: PromptClass, st: ClassState, due: bool) -> Plan:
        """While off, probe at the cheapest k (the range's least): first EARLY_ROUNDS rounds, and
        only if those could still beat plain, the rest of min_rounds, at once."""
        k, s = self._off_probe_k(cls, st), self.policy.settings
        have = self._rounds(st, k)
        if EARLY_ROUNDS <= have < s.min_rounds and self._hopeful(st, k):
            st.since_probe, st.probing = 0, True
            return Plan(0, f"probing k={k} while off: its first rounds could pay", (k, s.min_rounds - have))
        if due:
            st.since_probe, st.probing = 0, True
            rounds = s.plain_rounds if have >= s.min_rounds else EARLY_ROUNDS
            return Plan(0, f"probing k={k} while off", (k, rounds))
        return Plan(0, "speculation off")

    @staticmethod
    def _off_probe_k(cls: PromptClass, st: ClassState) -> int:
        return cls.draft_len.min if _adapts(cls) else st.k

    def _hopeful(self, st: ClassState, k: int) -> bool:
        """k's rounds so far could still beat plain (the early-off test, passed)."""
        spec, plain = self._switch_rows(st, k), self.plain_rows(st)
        return bool(spec and plain) and can_still_pay(k, spec, plain, self.policy.settings.min_gain)

    def round_k(self, name: str, schedule: Schedule) -> int:
        """k for a prompt's next round: its lead run's, else the class's current decision, which a
        decision taken mid-prompt changes at once (a reload waits for the next prompt)."""
        cls = self._class(name)
        lead = schedule.lead_k()
        if cls.speculate == "off":
            return 0
        if cls.speculate == "on":
            return start_k(cls)
        if lead is not None:
            return lead
        st = self.state(name)
        if schedule.override is not None:
            return st.k if schedule.override else 0
        if not st.speculate and self._watching(schedule):
            return st.k  # an off class watches each prompt's first rounds: a prompt that copies turns on
        return st.k if st.speculate else 0

    def _next_probe(self, cls: PromptClass, st: ClassState, short: dict[int, int]) -> int | None:
        """The next other k in range to gather evidence for: one whose probe a prompt's end cut
        short first, then untried ones, nearest first (goodput need not be smooth in k: verify
        cost depends on the kernel's shape), then the one probed longest ago."""
        others = _other_ks(cls, st)
        return min(others, key=lambda k: (k not in short, st.probed.get(k, -1), abs(k - st.k), k), default=None)

    def _cut_short(self, cls: PromptClass, st: ClassState) -> dict[int, int]:
        """Other k in range whose probe a prompt's end cut short, to finish at once, with their
        paired rounds: fewer than min_rounds of its rounds paired with the round at k after them
        (every pair; a move compares the capped ones among them), none of them so old that its partner left k's window (a probe
        older than the window waits for the probe cadence)."""
        short = {}
        for k in _other_ks(cls, st):
            if self._rounds(st, k):
                paired, stale = self._paired(st, k)
                if paired < self.policy.settings.min_rounds and not stale:
                    short[k] = paired
        return short

    def decide_due(self, name: str) -> bool:
        """A decision is checked every plain_rounds new rounds of a class, mid-prompt included;
        every EARLY_ROUNDS while speculation's k has no more than min_rounds (early off)."""
        st, s = self.state(name), self.policy.settings
        early = st.speculate and self._rounds(st, st.k) <= s.min_rounds
        return st.fresh >= (EARLY_ROUNDS if early else s.plain_rounds)

    def decide_when_due(self, name: str, schedule: Schedule) -> Decision | None:
        """Check a decision when one is due, never inside a lead run (a re-measure or probe is
        judged whole)."""
        return self.decide(name) if schedule.lead_over() and self.decide_due(name) else None

    def start_prompt(self, name: str, prompt_id: str = "") -> Schedule:
        """Plan a prompt of class `name`: the live session and what-if alike."""
        self.flush()
        return Schedule(self.plan(name), prompt_id)

    def after_round(self, ev: RoundVerified, schedule: Schedule) -> Decision | None:
        """Take a round as evidence, judge the prompt's own first rounds once they are in, and
        decide for the class if due: the live session and what-if alike. A prompt decision and a
        class decision on one round: the prompt's comes first, the class's at the next due round.

        A round that can bring no decision is only set aside, and observed with the next round that
        might (or at the next plan or reload): the same decisions at the same rounds, while the
        work falls on one round in several. Between forward passes, which flush the CPU's caches,
        the first touch of each dict and deque costs 10-30x what it costs warm (measured live)."""
        if self._quiet(ev, schedule):
            self._pending.append(ev)
            return None
        self.flush()
        self.observe(ev)
        own = self._prompt_decision(ev, schedule)
        return own if own is not None else self.decide_when_due(ev.prompt_class, schedule)

    # -- decisions ---------------------------------------------------------------------------
    def _prompt_decision(self, ev: RoundVerified, schedule: Schedule) -> Decision | None:
        """policy.prompt_rounds: after that many of this prompt's rounds that drafted (outside its
        lead run), on for the rest of it if they pay well, off if they do not pay."""
        need = self.policy.settings.prompt_rounds
        if not need or schedule.judged or not ev.draft_len or not ev.proposed or not schedule.lead_over():
            return None
        cls = self._class(ev.prompt_class)
        if cls.speculate != "auto":
            return None
        schedule.own.append(Row.of(ev))
        if len(schedule.own) < need:
            return None
        st = self.state(ev.prompt_class)
        plain = self.plain_rows(st)
        if st.speculate and len(plain) < self.policy.settings.plain_rounds:
            return None  # it speculates anyway: judge it once silent rounds have measured plain's cost
        schedule.judged = True
        thresholds = {**self.thresholds(cls), "prompt": 1.0}
        outcome = decide_prompt(st.speculate, st.k, schedule.own + plain, thresholds)
        if outcome is None:
            return None
        key = "prompt_off" if not outcome.speculate and self.policy.settings.prompt_off is not None else "prompt_rounds"
        event = self._event(ev.prompt_class, st, outcome, thresholds, ("policy", key), f"policy.{key}",
                            reason=f"prompt {schedule.prompt_id or ev.prompt_id}: its first {need} rounds")
        if event.applied:
            schedule.override = outcome.speculate
        return event

    def decide(self, name: str) -> Decision | None:
        cls, st = self._class(name), self.state(name)
        st.fresh = 0
        if cls.speculate != "auto":
            return None
        if (raised := self._match_decision(name, cls, st)) is not None:
            return raised  # drafting less often is the smaller change (an off class's watched rounds draft too)
        thresholds = self.thresholds(cls)
        if thresholds.get("interval"):
            outcome = decide_grouped(st.speculate, st.k, self._grouped(st), thresholds)
        else:
            rows = [row for k, window in st.windows.items() if k for row in window] + self.plain_decoded(st)
            outcome = decide(st.speculate, st.k, rows, thresholds)
        confirmed = outcome is None and self._judged(cls, st)
        self._pace_measures(st, changed=outcome is not None, confirmed=confirmed, far=confirmed and self._far_ahead(st))
        if outcome is None:
            return None
        index = self.policy.classes.index(cls)
        key = f"classes[{index}].draft_len" if outcome.rule == "draft_len" else outcome.rule
        path = ("classes", index, "draft_len") if outcome.rule == "draft_len" else tuple(outcome.rule.split("."))
        event = self._event(name, st, outcome, thresholds, path, key)
        if event.applied:
            st.speculate, st.k = outcome.speculate, outcome.k
        return event

    def _match_decision(self, name: str, cls: PromptClass, st: ClassState) -> Decision | None:
        """classes[i].ngram.max_match: raise min_match by one when the rounds at k whose match was
        exactly min_match tokens surely lose to plain steps (match.decide_match)."""
        confidence = self.confidence(name)
        if confidence is None or confidence[0] >= cls.ngram.max_match or st.match_advised > confidence[0]:
            return None  # nothing to raise, or advised already (advise mode): the other rules have their turn
        match, s = confidence[0], self.policy.settings
        window = st.windows.get(st.k, ())
        if len(match_rows(window, st.k, match)) < s.min_rounds:
            return None  # the common case, counted without building the plain side
        thresholds = {**self.thresholds(cls), "match": float(match), "max_match": float(cls.ngram.max_match)}
        outcome = decide_match(st.speculate, st.k, [*window, *self.plain_decoded(st)], thresholds)
        if outcome is None:
            return None
        index = self.policy.classes.index(cls)
        event = self._event(name, st, outcome, thresholds, ("classes", index, "ngram"),
                            f"classes[{index}].ngram.max_match", match=(match, outcome.match))
        st.match_advised = outcome.match
        if event.applied:
            st.min_match = outcome.match
            self._forget_drafts(st, outcome.match)
        self._pace_measures(st, changed=event.applied, confirmed=False, far=False)  # the drafter changed
        return event

    def _forget_drafts(self, st: ClassState, match: int) -> None:
        """Drop the rounds whose drafts the raised min_match no longer proposes: the switch and
        k moves judge the drafter as it now is (a decision cites only rounds it used, so explain
        still recomputes every one)."""
        for k, window in st.windows.items():
            if any(stale(r, match) for r in window):
                st.windows[k] = collections.deque((r for r in window if not stale(r, match)), maxlen=window.maxlen)

    def _event(self, name: str, st: ClassState, outcome, thresholds: dict[str, float], path: tuple,
               key: str, reason: str = "", match: tuple[int, int] = (0, 0)) -> Decision:
        event = Decision(
            session_id=self.session_id, t=time.time(), decision_id=self.decisions, prompt_class=name,
            speculate_from=st.speculate, speculate_to=outcome.speculate, k_from=st.k, k_to=outcome.k,
            rule_key=key, rule_line=self.policy.line_of(*path), inputs=outcome.inputs, thresholds=thresholds,
            round_ids=outcome.round_ids, applied=self.policy.settings.mode == "enforce",
            policy_sha256=self.policy.sha256, reason=reason, match_from=match[0], match_to=match[1],
        )
        self.decisions += 1
        return event

    def _judged(self, cls: PromptClass, st: ClassState) -> bool:
        """The evidence gives a verdict: while on, enough rounds of plain and of k; while off,
        the probe's k has either failed the early-off test or has min_rounds rounds."""
        s = self.policy.settings
        if len(self.plain_rows(st)) < s.plain_rounds:
            return False
        if st.speculate:
            return self._rounds(st, st.k) >= s.min_rounds and not self._cut_short(cls, st)
        k = self._off_probe_k(cls, st)
        have = self._rounds(st, k)
        return have >= s.min_rounds or (have >= EARLY_ROUNDS and not self._hopeful(st, k))

    def _far_ahead(self, st: ClassState) -> bool:
        s = self.policy.settings
        if not st.speculate:
            return False
        line = (1 + s.min_gain + s.hysteresis) * FAR_AHEAD
        return goodput(self._switch_rows(st, st.k)) >= goodput(self.plain_rows(st)) * line

    def _pace_measures(self, st: ClassState, changed: bool, confirmed: bool, far: bool) -> None:
        """A plain re-measure or a probe that confirms the decision doubles the gap to the next
        of its kind, up to 8x remeasure_every (probe_every); any change resets both gaps. Plain
        is re-measured at the longest gap at once while speculation is far ahead."""
        base = self.policy.settings.remeasure_every
        if changed:
            st.remeasure_gap = base
        elif far:
            st.remeasure_gap = 8 * base
        elif st.remeasuring and confirmed:
            st.remeasure_gap = min(2 * (st.remeasure_gap or base), 8 * base)
        st.remeasuring = False
        probe_base = self.policy.settings.probe_every
        if changed:
            st.probe_gap, st.since_probe = probe_base, 0
        elif st.probing and confirmed:
            st.probe_gap = min(2 * (st.probe_gap or probe_base), 8 * probe_base)
        st.probing = False

    def thresholds(self, cls: PromptClass) -> dict[str, float]:
        s, k = self.policy.settings, cls.draft_len
        ranged = isinstance(k, DraftLen)
        return {"min_gain": s.min_gain, "hysteresis": s.hysteresis, "min_rounds": float(s.min_rounds),
                "plain_rounds": float(s.plain_rounds), "k_gain": s.min_gain + s.hysteresis,
                "early_rounds": float(EARLY_ROUNDS), "paired": 1.0, "adjacent": 1.0, "capped": 1.0,
                "adapt": float(ranged and k.adapt == "goodput"),
                "k_min": float(k.min if ranged else k), "k_max": float(k.max if ranged else k),
                **({"interval": 1.0} if s.interval else {}),
                **({"prompt_rounds": float(s.prompt_rounds)} if s.prompt_rounds else {}),
                **({"silent_plain": 1.0, "switch_drafted": 1.0, "prompt_off": 1.0} if s.silent_plain else {}),
                **({"prompt_off": s.prompt_off} if s.prompt_off is not None else {})}

    # -- hot reload --------------------------------------------------------------------------
    def in_force(self) -> list[ClassInForce]:
        """Every class as its next prompt will run: on/off, k and the n-gram min_match."""
        return [ClassInForce(c.name, self.state(c.name).speculate and c.speculate != "off",
                             start_k(c) if c.speculate == "on" else self.state(c.name).k,
                             (self.confidence(c.name) or (0, 0))[0]) for c in self.policy.classes]

    def maybe_reload(self) -> PolicyLoaded | None:
        """If the file changed: a valid edit takes over now (called between prompts, so each class
        runs by it from its next prompt), an invalid one is refused and reported. A class whose
        table changed starts again from the file (its k, on/off, n-gram settings and evidence: the
        rounds gathered under the old table measured another class); the others keep what they learned."""
        mtime = file_stamp(self.policy.source)
        if mtime == self._mtime:
            return None
        self.flush()  # the rounds before the edit are evidence under the policy they ran by
        self._mtime = mtime
        try:
            new = load_policy(Path(self.policy.source))
        except SpecmonError as exc:
            return refused_event(self.policy.source, self.session_id, str(exc))
        except Exception as exc:  # noqa: BLE001 - the promise: a reload never ends the run
            return refused_event(self.policy.source, self.session_id, f"{self.policy.source}: cannot load it ({exc!r})")
        old, self.policy = self.policy, new
        before = {c.name: c for c in old.classes}
        kept = {c.name for c in new.classes}
        changed = [c.name for c in new.classes if before.get(c.name) != c] + [n for n in before if n not in kept]
        for name in changed:
            self.states.pop(name, None)
        if old.settings != new.settings:
            changed.append("policy")
        return loaded_event(new, self.session_id, self.in_force(), changed)

    def class_of(self, name: str) -> PromptClass:
        """The class by name, as the policy in force has it (the default class if a reload removed it)."""
        return self._class(name)

    def _class(self, name: str) -> PromptClass:
        """The class by name; if a reload removed it, the default class stands in."""
        if self._by_name is None or self._by_name[0] is not self.policy:
            self._by_name = (self.policy, {c.name: c for c in reversed(self.policy.classes)})
        found = self._by_name[1].get(name)
        return found if found is not None else next(c for c in self.policy.classes if c.default)


def _adapts(cls: PromptClass) -> bool:
    return isinstance(cls.draft_len, DraftLen) and cls.draft_len.adapt != "none"


def _other_ks(cls: PromptClass, st: ClassState) -> list[int]:
    """The draft lengths a probe may try: the class's range less its current k (none if k is fixed)."""
    if not _adapts(cls):
        return []
    return [k for k in range(cls.draft_len.min, cls.draft_len.max + 1) if k != st.k]
