"""The policy at run time: classify prompts, plan each prompt's k, gather evidence, decide.

Work per round is one append to a bounded window; deciding runs once per prompt."""

from __future__ import annotations

import collections
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from specmon.errors import SpecmonError
from specmon.events.schema import Decision, PolicyLoaded, RoundVerified
from specmon.policy.classify import classify
from specmon.policy.decide import Row, decide
from specmon.policy.schema import DraftLen, Policy, PromptClass, load_policy


@dataclass
class ClassState:
    speculate: bool
    k: int
    prompts: int = 0
    windows: dict[int, collections.deque] = field(default_factory=dict)  # k -> recent Rows


def start_k(cls: PromptClass) -> int:
    k = cls.draft_len
    return k if isinstance(k, int) else (k.start or k.min)


class PolicyEngine:
    def __init__(self, policy: Policy, session_id: str):
        self.policy = policy
        self.session_id = session_id
        self.states: dict[str, ClassState] = {}
        self.decisions = 0
        self._mtime = _mtime(policy.source)

    # -- classification and planning -----------------------------------------------------
    def classify(self, text: str, tag: str | None = None) -> tuple[str, str]:
        return classify(self.policy, text, tag)

    def state(self, name: str) -> ClassState:
        if name not in self.states:
            cls = self._class(name)
            self.states[name] = ClassState(speculate=cls.speculate != "off", k=start_k(cls))
        return self.states[name]

    def plan(self, name: str) -> tuple[int, str]:
        """(k for this class's next prompt, why): the policy's k, or a plain re-measure, or a probe."""
        cls, st, s = self._class(name), self.state(name), self.policy.settings
        st.prompts += 1
        if cls.speculate != "auto":
            return (st.k if cls.speculate == "on" else 0), f"speculate = {cls.speculate}"
        if self._rounds(st, 0) < s.min_rounds:
            return 0, "measuring plain decoding"
        if st.speculate and self._rounds(st, st.k) < s.min_rounds:
            return st.k, "measuring speculation"
        if st.speculate:
            if s.remeasure_every and st.prompts % s.remeasure_every == 0:
                return 0, "re-measuring plain decoding"
            neighbour = self._neighbour(cls, st)
            if neighbour is not None and s.probe_every and st.prompts % s.probe_every == s.probe_every // 2:
                return neighbour, f"trying k={neighbour}"
            return st.k, "policy"
        if s.probe_every and st.prompts % s.probe_every == 0:
            return st.k, "probing speculation while off"
        return 0, "speculation off"

    def round_k(self, name: str, planned: int) -> int:
        """k for the next round of a prompt planned at `planned`: a reloaded policy that now
        says speculate = "off" or "on" for this class takes effect at once."""
        cls = self._class(name)
        if cls.speculate == "off":
            return 0
        if cls.speculate == "on":
            return start_k(cls)
        return planned

    def _neighbour(self, cls: PromptClass, st: ClassState) -> int | None:
        """The next k to gather evidence for: the nearer untried or staler neighbour in range."""
        if not isinstance(cls.draft_len, DraftLen) or cls.draft_len.adapt == "none":
            return None
        candidates = [k for k in (st.k - 1, st.k + 1) if cls.draft_len.min <= k <= cls.draft_len.max]
        return min(candidates, key=lambda k: self._rounds(st, k), default=None)

    # -- evidence and decisions ------------------------------------------------------------
    def observe(self, ev: RoundVerified) -> None:
        st = self.state(ev.prompt_class)
        window = st.windows.setdefault(ev.draft_len, collections.deque(maxlen=self.policy.settings.evidence_window))
        window.append(Row.of(ev))

    def decide(self, name: str) -> Decision | None:
        cls, st = self._class(name), self.state(name)
        if cls.speculate != "auto":
            return None
        thresholds = self.thresholds(cls)
        rows = [row for window in st.windows.values() for row in window]
        outcome = decide(st.speculate, st.k, rows, thresholds)
        if outcome is None:
            return None
        index = self.policy.classes.index(cls)
        key = f"classes[{index}].draft_len" if outcome.rule == "draft_len" else outcome.rule
        path = ("classes", index, "draft_len") if outcome.rule == "draft_len" else tuple(outcome.rule.split("."))
        applied = self.policy.settings.mode == "enforce"
        event = Decision(
            session_id=self.session_id, t=time.time(), decision_id=self.decisions, prompt_class=name,
            speculate_from=st.speculate, speculate_to=outcome.speculate, k_from=st.k, k_to=outcome.k,
            rule_key=key, rule_line=self.policy.line_of(*path), inputs=outcome.inputs, thresholds=thresholds,
            round_ids=outcome.round_ids, applied=applied, policy_sha256=self.policy.sha256,
        )
        self.decisions += 1
        if applied:
            st.speculate, st.k = outcome.speculate, outcome.k
        return event

    def thresholds(self, cls: PromptClass) -> dict[str, float]:
        s, k = self.policy.settings, cls.draft_len
        ranged = isinstance(k, DraftLen)
        return {"min_gain": s.min_gain, "hysteresis": s.hysteresis, "min_rounds": float(s.min_rounds),
                "adapt": float(ranged and k.adapt == "goodput"),
                "k_min": float(k.min if ranged else k), "k_max": float(k.max if ranged else k)}

    # -- hot reload --------------------------------------------------------------------------
    def maybe_reload(self) -> PolicyLoaded | None:
        """If the file changed: a valid edit takes over now, an invalid one is refused and reported."""
        mtime = _mtime(self.policy.source)
        if mtime == self._mtime:
            return None
        self._mtime = mtime
        try:
            new = load_policy(Path(self.policy.source))
        except SpecmonError as exc:
            text = Path(self.policy.source).read_text() if os.path.exists(self.policy.source) else ""
            return PolicyLoaded(session_id=self.session_id, t=time.time(), source=self.policy.source,
                                sha256="", text=text, accepted=False, error=str(exc))
        self.policy = new
        return loaded_event(new, self.session_id)

    def _class(self, name: str) -> PromptClass:
        """The class by name; if a reload removed it, the default class stands in."""
        found = [c for c in self.policy.classes if c.name == name]
        return found[0] if found else next(c for c in self.policy.classes if c.default)

    @staticmethod
    def _rounds(st: ClassState, k: int) -> int:
        return len(st.windows.get(k, ()))


def loaded_event(policy: Policy, session_id: str) -> PolicyLoaded:
    return PolicyLoaded(session_id=session_id, t=time.time(), source=policy.source, sha256=policy.sha256,
                        text=policy.text, accepted=True)


def _mtime(path: str) -> float:
    try:
        stat = os.stat(path)
        return stat.st_mtime_ns + stat.st_size
    except OSError:
        return 0.0
