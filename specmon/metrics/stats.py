"""The metric definitions, in one place (for users: the tables of docs/running.md and docs/live-view.md).

Accumulators store counts and time sums only; every ratio is a property derived from them,
with its definition beside it. Everything is computed from events, so a replayed log yields
exactly the figures the live run showed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from specmon.events.schema import AnyEvent, PromptFinished, PromptStarted, RoundVerified, Sampling
from specmon.metrics import rates
from specmon.metrics.contention import HostTally, disturbed
from specmon.metrics.interval import PromptTotals, SpeedupEstimate, sanity_bound, speedup_estimate


@dataclass
class PhaseMs:
    """Rounds and their draft and verify ms: what a cost model prices a round by."""

    rounds: int = 0
    draft_ms: float = 0.0
    verify_ms: float = 0.0

    def add(self, ev: RoundVerified) -> None:
        self.rounds += 1
        self.draft_ms += ev.draft_ms
        self.verify_ms += ev.verify_ms


@dataclass
class RunStats:
    """Counts over the rounds of one prompt class at one draft length."""

    draft_len: int
    rounds: int = 0
    empty_rounds: int = 0  # rounds that asked for k > 0 drafts but got none (excluded from acceptance)
    proposed: int = 0
    accepted: int = 0
    emitted: int = 0
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    overhead_ms: float = 0.0
    # rounds the host left alone, priced apart: other work slows plain steps and verify passes unequally
    quiet_drafted: PhaseMs = field(default_factory=PhaseMs)  # that proposed something (eq. 1's costs)
    quiet_plain: PhaseMs = field(default_factory=PhaseMs)  # that proposed nothing (a plain step's cost)
    alpha_sum: float = 0.0
    alpha_rounds: int = 0
    accepted_gt: list[int] = field(default_factory=list)  # [i]: rounds with accepted > i
    proposed_gt: list[int] = field(default_factory=list)  # [i]: rounds with proposed > i
    rejections: list[int] = field(default_factory=list)  # [i]: rounds whose first rejection was at i
    all_accepted: int = 0  # rounds that proposed something and had no rejection
    verdicts: Counter[str] = field(default_factory=Counter)  # equivalence verdict -> prompts
    prompt_emitted: Counter[str] = field(default_factory=Counter)  # per prompt: the unit of an interval
    prompt_ms: Counter[str] = field(default_factory=Counter)
    host: HostTally = field(default_factory=HostTally)  # rounds the host disturbed (metrics.contention)

    def add_round(self, ev: RoundVerified) -> None:
        n_prop = len(ev.proposed)
        self.rounds += 1
        self.host.add(ev)
        self.empty_rounds += ev.draft_len > 0 and n_prop == 0
        self.proposed += n_prop
        self.accepted += ev.accepted
        self.emitted += len(ev.emitted)
        self.draft_ms += ev.draft_ms
        self.verify_ms += ev.verify_ms
        self.overhead_ms += ev.overhead_ms
        if not disturbed(ev):
            (self.quiet_drafted if n_prop else self.quiet_plain).add(ev)
        self.prompt_emitted[ev.prompt_id] += len(ev.emitted)
        self.prompt_ms[ev.prompt_id] += rates.round_ms(ev)
        if ev.alpha_hat is not None:
            self.alpha_sum += ev.alpha_hat
            self.alpha_rounds += 1
        _bump_below(self.proposed_gt, n_prop)
        _bump_below(self.accepted_gt, ev.accepted)
        if ev.rejection_pos is not None:
            self.rejections.extend([0] * (ev.rejection_pos + 1 - len(self.rejections)))
            self.rejections[ev.rejection_pos] += 1
        elif n_prop:
            self.all_accepted += 1

    def add_finish(self, ev: PromptFinished) -> None:
        self.verdicts[ev.equivalence.verdict] += 1

    @property
    def round_ms(self) -> float:
        return rates.round_ms(self)

    @property
    def drafted_rounds(self) -> int:
        """Rounds that proposed at least one draft token."""
        return self.proposed_gt[0] if self.proposed_gt else 0

    @property
    def acceptance_rate(self) -> float | None:
        """Σ accepted / Σ proposed; rounds that proposed nothing add to neither."""
        return rates.acceptance_rate(self.accepted, self.proposed)

    @property
    def mean_accepted_len(self) -> float | None:
        """Σ accepted / rounds; tokens per round is this plus one."""
        return rates.ratio(self.accepted, self.rounds)

    @property
    def per_position(self) -> list[float]:
        """a_i = rounds with accepted > i / rounds with proposed > i."""
        return [a / p for a, p in zip(self.accepted_gt + [0] * len(self.proposed_gt), self.proposed_gt)]

    @property
    def alpha_hat(self) -> float | None:
        """Mean over rounds of Σ_x min(p, q) averaged over proposed positions."""
        return rates.ratio(self.alpha_sum, self.alpha_rounds)

    @property
    def goodput(self) -> float | None:
        """Emitted tokens per millisecond of round time."""
        return rates.goodput(self.emitted, self.round_ms)

    @property
    def tok_per_s(self) -> float | None:
        return None if self.goodput is None else self.goodput * 1e3

    def mean_ms(self, total: float) -> float | None:
        return rates.ratio(total, self.rounds)

    @property
    def prompts(self) -> int:
        """Prompts with a round in this run: at k > 0, those that ran with speculation."""
        return len(self.prompt_emitted)

    @property
    def prompt_totals(self) -> PromptTotals:
        return PromptTotals(self.prompt_emitted, self.prompt_ms)


def _bump_below(counts: list[int], n: int) -> None:
    """Add one to counts[0..n-1], growing the list: this round reached every position below n."""
    counts.extend([0] * (n - len(counts)))
    for i in range(n):
        counts[i] += 1


@dataclass
class ClassStats:
    """Speculative and plain-decoding runs of one prompt class, side by side."""

    name: str
    runs: dict[int, RunStats] = field(default_factory=dict)  # draft_len -> stats

    def run(self, draft_len: int) -> RunStats:
        return self.runs.setdefault(draft_len, RunStats(draft_len))

    @property
    def baseline(self) -> RunStats | None:
        return self.runs.get(0)

    @property
    def speculative(self) -> RunStats | None:
        """The speculative run with the most rounds (one per class in a plain `specmon run`)."""
        candidates = [r for k, r in self.runs.items() if k > 0]
        return max(candidates, key=lambda r: r.rounds, default=None)

    def speedup(self, draft_len: int) -> float | None:
        """Goodput with speculation at k / goodput of plain decoding, same class, same run."""
        spec, base = self.runs.get(draft_len), self.baseline
        return None if spec is None or base is None else rates.speedup(spec.goodput, base.goodput)

    def speedup_estimate(self, draft_len: int) -> SpeedupEstimate | None:
        """The speedup at k with its 95% interval over prompts and the sanity bound."""
        spec, base = self.runs.get(draft_len), self.baseline
        if spec is None or base is None or not spec.rounds or not base.rounds:
            return None
        bound = sanity_bound(spec.mean_accepted_len, base.mean_ms(base.round_ms), spec.mean_ms(spec.round_ms))
        return speedup_estimate(spec.prompt_totals, base.prompt_totals, bound, busy=(spec.host + base.host).busy)


def class_stats(events: Iterable[AnyEvent]) -> dict[str, ClassStats]:
    """Fold an event stream into per-class, per-draft-length statistics."""
    classes: dict[str, ClassStats] = {}
    for ev in events:
        if isinstance(ev, (RoundVerified, PromptFinished)):
            run = classes.setdefault(ev.prompt_class, ClassStats(ev.prompt_class)).run(ev.draft_len)
            (run.add_round if isinstance(ev, RoundVerified) else run.add_finish)(ev)
    return classes


def summary(classes: dict[str, ClassStats]) -> dict:
    """The JSON shape of `specmon run --json`: {"classes": {name: {...}}}.

    A class's own keys are its figures at its main k (`ClassStats.speculative`, or plain decoding
    when it never speculated); "by_draft_len" holds the same keys for every k it ran rounds at,
    k = 0 (plain decoding, the side its speedups are measured against) included, by str(k), k rising."""
    return {"classes": {name: _class_summary(c) for name, c in classes.items()}}


def _class_summary(c: ClassStats) -> dict:
    main = c.speculative or c.baseline
    assert main is not None
    by_draft_len = {str(k): _run_summary(c, run) for k, run in sorted(c.runs.items()) if run.rounds or run is main}
    return {**by_draft_len[str(main.draft_len)], "by_draft_len": by_draft_len}


def _run_summary(c: ClassStats, spec: RunStats) -> dict:
    """One (class, k) row: the run's counts and ratios, its speedup over the class's plain run."""
    base = c.baseline
    identical = None
    if spec.verdicts and "sampled" not in spec.verdicts and spec.draft_len > 0:
        identical = set(spec.verdicts) == {"identical"}
    return {
        "draft_len": spec.draft_len,
        "prompts": spec.prompts,
        "rounds": spec.rounds,
        "empty_rounds": spec.empty_rounds,
        "proposed": spec.proposed,
        "accepted": spec.accepted,
        "emitted": spec.emitted,
        "acceptance_rate": spec.acceptance_rate,
        "mean_accepted_len": spec.mean_accepted_len,
        "per_position_acceptance": spec.per_position,
        "alpha_hat": spec.alpha_hat,
        "rejection_positions": spec.rejections,
        "all_accepted_rounds": spec.all_accepted,
        "draft_ms": spec.mean_ms(spec.draft_ms),
        "verify_ms": spec.mean_ms(spec.verify_ms),
        "overhead_ms": spec.mean_ms(spec.overhead_ms),
        "tok_per_s": spec.tok_per_s,
        "baseline_tok_per_s": base.tok_per_s if base else None,
        "speedup": c.speedup(spec.draft_len) if spec.draft_len else None,  # plain over itself is no finding
        **_interval(c.speedup_estimate(spec.draft_len) if spec.draft_len else None),
        "greedy_identical": identical,
        "equivalence": dict(spec.verdicts),
        **(spec.host + base.host if base and base is not spec else spec.host).figures("host_"),
    }


def _interval(estimate: SpeedupEstimate | None) -> dict:
    """The speedup's 95% interval over prompts, its sample sizes and what it allows one to say."""
    estimate = estimate or SpeedupEstimate(None, None, None, 0, 0, None)  # no estimate: not yet known
    return {
        "speedup_low": estimate.low,
        "speedup_high": estimate.high,
        "speedup_verdict": estimate.verdict,
        "speedup_prompts": [estimate.prompts_spec, estimate.prompts_plain],
        "speedup_bound": estimate.bound,
    }


@dataclass(frozen=True)
class CellKey:
    """One cell of a sweep: a class decoded by one drafter at one k under one sampling setting."""

    prompt_class: str
    drafter: str
    sampling: Sampling
    draft_len: int


def cell_stats(events: Iterable[AnyEvent]) -> dict[CellKey, RunStats]:
    """Like class_stats, but keyed by drafter and sampling too (a round belongs to the prompt run
    its PromptStarted opened; k = 0 rounds are plain decoding whatever the drafter)."""
    cells: dict[CellKey, RunStats] = {}
    current: PromptStarted | None = None  # rounds follow the PromptStarted of their run
    for ev in events:
        if isinstance(ev, PromptStarted):
            current = ev
        elif isinstance(ev, RoundVerified) and current is not None:
            key = CellKey(ev.prompt_class, current.drafter if ev.draft_len else "none", ev.sampling, ev.draft_len)
            cells.setdefault(key, RunStats(ev.draft_len)).add_round(ev)
        elif isinstance(ev, PromptFinished) and ev.sampling is not None:
            key = CellKey(ev.prompt_class, ev.drafter if ev.draft_len else "none", ev.sampling, ev.draft_len)
            cells.setdefault(key, RunStats(ev.draft_len)).add_finish(ev)
    return cells
