"""What the panes show, folded from events. Pure Python: no Textual here, so it is tested alone
and a replayed log yields exactly what the live run showed."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from specmon.events.schema import (
    AnyEvent, Decision, PolicyLoaded, PromptFinished, PromptStarted, ResourceSample, RoundVerified,
    SessionFinished, SessionStarted,
)
from specmon.metrics.rates import acceptance_rate
from specmon.metrics.stats import ClassStats, RunStats

WINDOW = 120  # rounds kept for the sparklines
TEXT_SPANS = 400  # styled spans kept for the streaming text
CITED_ROUNDS_KEPT = 20_000
ACCEPTANCE_METRICS = ("acceptance rate", "mean accepted length", "alpha-hat")


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
    current_prompt: str = ""
    current_k: int = 0
    draft_len_by_class: dict[str, int] = field(default_factory=dict)
    acceptance: collections.deque = field(default_factory=lambda: collections.deque(maxlen=WINDOW))
    draft_ms: collections.deque = field(default_factory=lambda: collections.deque(maxlen=WINDOW))
    verify_ms: collections.deque = field(default_factory=lambda: collections.deque(maxlen=WINDOW))
    overhead_ms: collections.deque = field(default_factory=lambda: collections.deque(maxlen=WINDOW))
    text: collections.deque = field(default_factory=lambda: collections.deque(maxlen=TEXT_SPANS))
    rss_bytes: int | None = None
    vram_used: int | None = None
    vram_total: int | None = None
    rounds_seen: int = 0
    text_version: int = 0  # bumped whenever the text grows, so the pane redraws only then
    decisions: list[Decision] = field(default_factory=list)
    policy: PolicyLoaded | None = None  # the last policy event: in force, or an edit refused
    # Rounds a decision may cite, by id: bounded, so a long session's memory stays flat.
    recent_rounds: collections.OrderedDict = field(default_factory=collections.OrderedDict)
    events_seen: int = 0

    def apply(self, batch: list[AnyEvent]) -> None:
        for event in batch:
            self.events_seen += 1
            handler = _HANDLERS.get(type(event))
            if handler:
                handler(self, event)

    # -- per event type -------------------------------------------------------------------
    def _session(self, ev: SessionStarted) -> None:
        self.session = ev

    def _prompt(self, ev: PromptStarted) -> None:
        self.current_class, self.current_prompt, self.current_k = ev.prompt_class, ev.prompt_id, ev.draft_len
        if ev.draft_len:
            self.draft_len_by_class[ev.prompt_class] = ev.draft_len
        mode = f"k={ev.draft_len}" if ev.draft_len else "plain"
        self.text.append(Span(f"\n── {ev.prompt_id} [{ev.prompt_class}] {mode} ──\n", "prompt"))
        self.text_version += 1

    def _round(self, ev: RoundVerified) -> None:
        self.rounds_seen += 1
        self.recent_rounds[ev.round_id] = ev
        if len(self.recent_rounds) > CITED_ROUNDS_KEPT:
            self.recent_rounds.popitem(last=False)
        self._stats(ev.prompt_class).run(ev.draft_len).add_round(ev)
        self.current_k = ev.draft_len
        if ev.draft_len:
            self.acceptance.append(ev)
            self.draft_ms.append(ev.draft_ms)
            self.verify_ms.append(ev.verify_ms)
            self.overhead_ms.append(ev.overhead_ms)
        self._text(ev)

    def _finished(self, ev: PromptFinished) -> None:
        self._stats(ev.prompt_class).run(ev.draft_len).add_finish(ev)

    def _resource(self, ev: ResourceSample) -> None:
        self.rss_bytes, self.vram_used, self.vram_total = ev.rss_bytes, ev.vram_used_bytes, ev.vram_total_bytes

    def _session_done(self, ev: SessionFinished) -> None:
        self.finished = ev

    def _decision(self, ev: Decision) -> None:
        self.decisions.append(ev)
        if ev.applied:
            self.draft_len_by_class[ev.prompt_class] = ev.k_to if ev.speculate_to else 0

    def _policy(self, ev: PolicyLoaded) -> None:
        self.policy = ev

    def cited(self, decision: Decision) -> list[RoundVerified]:
        """The rounds a decision cites that are still held (all of them in any normal session)."""
        return [self.recent_rounds[rid] for rid in decision.round_ids if rid in self.recent_rounds]

    def _stats(self, name: str) -> ClassStats:
        return self.classes.setdefault(name, ClassStats(name))

    def _text(self, ev: RoundVerified) -> None:
        """Accepted draft tokens, then the target's own token: a correction or a bonus."""
        if ev.accepted_text:
            self.text.append(Span(ev.accepted_text, "accepted"))
        if ev.final_text:
            kind = "plain" if not ev.proposed else "correction" if ev.rejection_pos is not None else "bonus"
            self.text.append(Span(ev.final_text, kind))
        self.text_version += bool(ev.accepted_text or ev.final_text)

    # -- derived figures (all through specmon.metrics) ----------------------------------------
    @property
    def class_k(self) -> int:
        """The draft length the current class speculates at (0: plain only so far)."""
        return self.draft_len_by_class.get(self.current_class, 0)

    def current_run(self) -> RunStats | None:
        """The current class's speculative run: the panes show it even while plain decoding runs."""
        stats = self.classes.get(self.current_class)
        return stats.runs.get(self.class_k) if stats and self.class_k else None

    def acceptance_series(self, metric: str) -> list[float]:
        """Per round over the window: accepted/proposed, accepted length, or alpha-hat."""
        if metric == "mean accepted length":
            return [float(ev.accepted) for ev in self.acceptance]
        if metric == "alpha-hat":
            return [ev.alpha_hat for ev in self.acceptance if ev.alpha_hat is not None]
        return [acceptance_rate(ev.accepted, len(ev.proposed)) for ev in self.acceptance if ev.proposed]


_HANDLERS = {
    SessionStarted: ViewState._session, PromptStarted: ViewState._prompt, RoundVerified: ViewState._round,
    PromptFinished: ViewState._finished, ResourceSample: ViewState._resource, SessionFinished: ViewState._session_done,
    Decision: ViewState._decision, PolicyLoaded: ViewState._policy,
}
