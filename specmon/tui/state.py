"""What the panes show, folded from events: no Textual here, so a replayed log yields what the live run showed."""

from __future__ import annotations

import collections
import re
from dataclasses import dataclass, field

from specmon.events.schema import (
    AnyEvent,
    Decision,
    PolicyLoaded,
    PromptFinished,
    PromptStarted,
    QueueSample,
    ResourceSample,
    RoundVerified,
    SessionFinished,
    SessionStarted,
    bench_fixed_k,
)
from specmon.metrics.contention import MIN_DISTURBED, MARK_SHARE, disturbed
from specmon.metrics.interval import SpeedupEstimate
from specmon.metrics.rates import acceptance_rate
from specmon.metrics.stats import ClassStats, RunStats
from specmon.tui.requests import Requests

WINDOW = 240  # recent rounds kept per class and k, for the sparklines
TEXT_SPANS = 400  # styled spans kept for the streaming text
CITED_ROUNDS_KEPT = 20_000
HOST_RECENT = 64  # the title says "host busy" while this many recent rounds are disturbed at MARK_SHARE
ACCEPTANCE_METRICS = ("acceptance rate", "mean accepted length", "alpha-hat")


# The shapes special tokens take in the tokenizers specmon loads: <|im_end|>, <|eot_id|>,
# <|endoftext|> (ChatML, Llama 3, GPT-2 style), and SentencePiece's end of sequence </s>.
SPECIAL_TOKEN = re.compile(r"<\|[A-Za-z0-9_.:-]{1,40}\|>|</s>")


@dataclass
class Span:
    text: str
    kind: str  # "prompt" | "accepted" | "correction" | "bonus" | "plain"


@dataclass
class ViewState:
    session: SessionStarted | None = None
    finished: SessionFinished | None = None
    classes: dict[str, ClassStats] = field(default_factory=dict)
    current_class: str = ""
    draft_len_by_class: dict[str, int] = field(default_factory=dict)  # the k in force; 0: speculation off
    off_by: dict[str, Decision] = field(default_factory=dict)  # the applied decision that switched a class off
    policy_off: set[str] = field(default_factory=set)  # classes the policy in force runs plain (speculate = false)
    decided: set[str] = field(default_factory=set)  # classes whose k in force a decision set (since a reload)
    removed: set[str] = field(default_factory=set)  # classes a reload took out of the policy (their rounds stay shown)
    last_spec_k: dict[str, int] = field(default_factory=dict)  # the last k > 0 a round of the class ran at
    # the k the class's latest prompt asked the drafter for, which its rounds carry; under the gate the k in
    # force is the longest draft it verifies, often shorter, so the figures key on this one
    asked_k: dict[str, int] = field(default_factory=dict)
    windows: dict[tuple[str, int], collections.deque] = field(  # (class, k) -> its recent rounds
        default_factory=lambda: collections.defaultdict(lambda: collections.deque(maxlen=WINDOW))
    )
    text: collections.deque = field(default_factory=lambda: collections.deque(maxlen=TEXT_SPANS))
    resource: ResourceSample | None = None  # the latest: VRAM and RSS
    round_mem_bytes: int | None = None  # RoundVerified.mem_bytes: memory when no ResourceSample came
    rounds_seen: int = 0
    text_version: int = 0  # bumped whenever the text grows, so the pane redraws only then
    decisions: list[Decision] = field(default_factory=list)
    policy: PolicyLoaded | None = None  # the last policy event: in force, or an edit refused
    policies_loaded: int = 0
    refused: PolicyLoaded | None = None  # the edit refused since the last policy taken (None: none stands)
    reloaded: PolicyLoaded | None = None  # the last reload taken (not the policy the run started with)
    # Rounds a decision may cite, by id: bounded, so a long session's memory stays flat.
    recent_rounds: collections.OrderedDict = field(default_factory=collections.OrderedDict)
    events_seen: int = 0
    last_t: float = 0.0  # the newest event's time: how old a notice is in the session's own time
    requests: Requests | None = None  # a server's queue and requests; None (no pane) in any other session
    prompt_drafters: dict[str, None] = field(default_factory=dict)  # drafters prompts ran with at k > 0, in order
    host_recent: collections.deque = field(default_factory=lambda: collections.deque(maxlen=HOST_RECENT))
    host_busy: tuple[float, float] | None = None  # wall clock of the busy stretches' first and last disturbed rounds
    _estimates: dict = field(default_factory=dict)  # (class, k) -> ((rounds, plain rounds), estimate)

    def apply(self, batch: list[AnyEvent]) -> None:
        for event in batch:
            self.events_seen += 1
            self.last_t = max(self.last_t, event.t)
            if latest := _LATEST.get(type(event)):
                setattr(self, latest, event)
            elif handler := _HANDLERS.get(type(event)):
                handler(self, event)
            if self.requests is None and isinstance(event, QueueSample):
                self.requests = Requests()  # only a server writes these: its session gets the requests pane
            if self.requests is not None:
                self.requests.apply(event)

    # -- per event type -------------------------------------------------------------------
    def _prompt(self, ev: PromptStarted) -> None:
        self.current_class = ev.prompt_class
        if ev.draft_len:
            self.prompt_drafters[ev.drafter] = None
            if bench_fixed_k(ev) is None:  # bench policy's fixed-k comparisons are not the class's own k
                self.asked_k[ev.prompt_class] = ev.draft_len
            if ev.prompt_class not in self.decided:  # a policy's decision stands until the next one
                self.draft_len_by_class[ev.prompt_class] = ev.draft_len
                self.off_by.pop(ev.prompt_class, None)
        mode = f"k={ev.draft_len}" if ev.draft_len else "plain"
        self.text.append(Span(f"\n── {ev.prompt_id} [{ev.prompt_class}] {mode} ──\n", "prompt"))
        self.text_version += 1

    def _round(self, ev: RoundVerified) -> None:
        self.rounds_seen += 1
        if ev.host_stall_ms is not None:
            self.host_recent.append(disturbed(ev))
            if self.host_recent[-1] and self.host_now_busy:  # a disturbed round of a busy stretch
                self.host_busy = (self.host_busy[0] if self.host_busy else ev.t, ev.t)
        self.recent_rounds[ev.round_id] = ev
        if len(self.recent_rounds) > CITED_ROUNDS_KEPT:
            self.recent_rounds.popitem(last=False)
        self._stats(ev.prompt_class).run(ev.draft_len).add_round(ev)
        self.round_mem_bytes = ev.mem_bytes
        if ev.draft_len:
            self.windows[ev.prompt_class, ev.draft_len].append(ev)
            self.last_spec_k[ev.prompt_class] = ev.draft_len
        self._text(ev)

    def _finished(self, ev: PromptFinished) -> None:
        self._stats(ev.prompt_class).run(ev.draft_len).add_finish(ev)

    def _decision(self, ev: Decision) -> None:
        self.decisions.append(ev)
        if not ev.applied or ev.route is not None:
            return  # advise mode, or a proxy's side: shown, not a switch of the class's k
        self.decided.add(ev.prompt_class)
        self.draft_len_by_class[ev.prompt_class] = ev.k_to if ev.speculate_to else 0
        if ev.speculate_to:
            self.off_by.pop(ev.prompt_class, None)
            self.policy_off.discard(ev.prompt_class)
        else:
            self.off_by[ev.prompt_class] = ev

    def _policy(self, ev: PolicyLoaded) -> None:
        self.policy = ev
        if not ev.accepted:
            self.refused = ev
            return
        self.refused = None  # a taken reload ends any refusal: its policy is the one in force now
        self.policies_loaded += 1
        if self.policies_loaded > 1:  # a reload may set a class on or off itself: prompts speak again
            self.reloaded = ev
            self.decided.clear()
        if not ev.classes:  # older logs have none: their prompts say the k, as before
            return
        # each class's k and on/off as the policy in force runs its next prompt, until a decision changes them
        in_policy = {c.name for c in ev.classes}
        self.removed = {name for name in self.classes if name not in in_policy}
        for c in ev.classes:
            self.decided.add(c.name)
            self.draft_len_by_class[c.name] = c.draft_len if c.speculate else 0
            if not c.min_match:  # gated n-gram classes (min_match) keep asking their file's k, cut per round
                self.asked_k.pop(c.name, None)
            if c.speculate or c.name in ev.changed:  # an unchanged class that is still off keeps its decision
                self.off_by.pop(c.name, None)
        self.policy_off = (self.policy_off - in_policy) | {c.name for c in ev.classes if not c.speculate}

    def cited(self, decision: Decision) -> list[RoundVerified]:
        """The rounds a decision cites that are still held (all of them in any normal session)."""
        return [self.recent_rounds[rid] for rid in decision.round_ids if rid in self.recent_rounds]

    def _stats(self, name: str) -> ClassStats:
        return self.classes.setdefault(name, ClassStats(name))

    def _text(self, ev: RoundVerified) -> None:
        """Accepted draft tokens, then the target's own (a correction or a bonus); special tokens are not text."""
        accepted, final = (SPECIAL_TOKEN.sub("", text) for text in (ev.accepted_text, ev.final_text))
        if accepted:
            self.text.append(Span(accepted, "accepted"))
        if final:
            kind = "plain" if not ev.proposed else "correction" if ev.rejection_pos is not None else "bonus"
            self.text.append(Span(final, kind))
        self.text_version += bool(accepted or final)

    # -- which rounds a figure covers --------------------------------------------------------
    def is_on(self, name: str) -> bool:
        return name not in self.removed and self.draft_len_by_class.get(name, 0) > 0

    def switched_off(self, name: str) -> bool:
        """The policy in force runs the class plain: its file says off, or a decision switched it off."""
        return name in self.policy_off or name in self.off_by

    def plain_done(self, name: str) -> bool:
        """A prompt of the class finished with plain decoding alone (its rounds all at k = 0 so far)."""
        stats = self.classes.get(name)
        base = stats.baseline if stats else None
        return bool(base and sum(base.verdicts.values()))

    def shown_k(self, name: str) -> int:
        """The k a class's figures are at: asked for while on; once off, the k it ran at; 0 if it never speculated."""
        if self.is_on(name):
            return self.asked_k.get(name) or self.draft_len_by_class[name]
        if name in self.off_by:
            return self.off_by[name].k_from
        return self.last_spec_k.get(name, 0)

    @property
    def class_k(self) -> int:
        """The draft length the current class's panes show (0: no speculative round yet)."""
        return self.shown_k(self.current_class)

    def run_for(self, name: str) -> RunStats | None:
        stats, k = self.classes.get(name), self.shown_k(name)
        return stats.runs.get(k) if stats and k else None

    def current_run(self) -> RunStats | None:
        """The current class's speculative run at its shown k (shown while plain rounds run, and once off)."""
        return self.run_for(self.current_class)

    def window(self) -> list[RoundVerified]:
        """The current run's most recent rounds (the same class and k as current_run)."""
        return list(self.windows.get((self.current_class, self.class_k), ()))

    def acceptance_series(self, metric: str) -> list[float | None]:
        """The current window's rounds by `metric`; None for a round that proposed nothing (never a zero)."""
        rounds = self.window()
        if metric == "mean accepted length":
            return [float(ev.accepted) if ev.proposed else None for ev in rounds]
        if metric == "alpha-hat":  # rounds whose drafter gave no distribution have no α̂: left out
            return [
                ev.alpha_hat if ev.proposed else None for ev in rounds if ev.alpha_hat is not None or not ev.proposed
            ]
        return [acceptance_rate(ev.accepted, len(ev.proposed)) for ev in rounds]

    def speedup_estimate(self, name: str, k: int) -> SpeedupEstimate | None:
        """specmon.metrics' estimate for a class at k, recomputed only when its rounds changed."""
        stats = self.classes.get(name)
        if stats is None or not k or k not in stats.runs:
            return None
        base = stats.baseline
        key = (stats.runs[k].rounds, base.rounds if base else 0)
        cached = self._estimates.get((name, k))
        if cached is None or cached[0] != key:
            cached = self._estimates[(name, k)] = (key, stats.speedup_estimate(k))
        return cached[1]

    @property
    def host_now_busy(self) -> bool:
        """Recent rounds are disturbed at MARK_SHARE or more (metrics.contention)."""
        hit = sum(self.host_recent)
        return hit >= MIN_DISTURBED and hit >= MARK_SHARE * len(self.host_recent)

    # -- what the title says ------------------------------------------------------------------
    @property
    def policy_session(self) -> bool:
        return self.policy is not None or bool(self.session and self.session.policy_hash)

    def mode_label(self) -> str:
        """ "policy" when a policy chooses k; else the k in force ("k=3", or per class)."""
        if self.policy_session:
            advised = self.decisions and not self.decisions[-1].applied
            return "policy (advise)" if advised else "policy"
        ks = {name: k for name, k in self.draft_len_by_class.items() if k}
        if not ks and self.classes:  # a fixed-k run decodes a prompt plainly first, then at k
            return "plain" if any(self.plain_done(name) for name in self.classes) else "plain first"
        if not ks:
            return ""
        if len(set(ks.values())) == 1:
            return f"k={next(iter(ks.values()))}"
        return "k " + " ".join(f"{name}={k}" for name, k in ks.items())

    def drafter_label(self) -> str:
        """The session's drafter; where it loaded none (a sweep), the ones its prompts ran with."""
        drafter = self.session.drafter if self.session else ""
        return ",".join(self.prompt_drafters) if drafter == "none" and self.prompt_drafters else drafter


_LATEST = {SessionStarted: "session", SessionFinished: "finished", ResourceSample: "resource"}  # kept as they come
_HANDLERS = {
    PromptStarted: ViewState._prompt,
    RoundVerified: ViewState._round,
    PromptFinished: ViewState._finished,
    Decision: ViewState._decision,
    PolicyLoaded: ViewState._policy,
}
