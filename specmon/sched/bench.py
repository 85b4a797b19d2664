"""`specmon bench policy`: the policy against every fixed draft length, per class.

The policy decodes the prompt set `repeat` times, learning as it goes; beside each of its prompts,
the same prompt is decoded at every fixed k (0 = plain), the decodes taking turns or in an order
that rotates (sched.turns), so drift in the machine's speed falls on all alike. A fixed run drafts
as `specmon run -k K` does (the plain n-gram lookup, each proposal verified whole), so auto against
fixed k measures the whole policy, its drafting and its cuts. Everything is logged; the fixed runs
are marked by their PromptStarted's class_rule, so the figures are recomputed from the log alone
(bench_results). A class's auto goodput counts every round the policy ran, its plain steps included."""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Callable, Generator, Iterable, Mapping, Sequence

from specmon.engine.draft_len import FixedDraftLen
from specmon.engine.drafters import NoDrafter
from specmon.engine.driver import UNCHECKED
from specmon.engine.prompts import Prompt, prompt_set
from specmon.errors import SpecmonError
from specmon.engine.rounds import drain
from specmon.events.schema import BENCH_FIXED_RULE, AnyEvent, PromptStarted, RoundVerified, Sampling, bench_fixed_k
from specmon.metrics.contention import HostTally
from specmon.metrics.interval import PromptTotals, SpeedupEstimate, speedup_estimate
from specmon.metrics.rates import goodput, speedup
from specmon.metrics.stats import RunStats
from specmon.sched.policy import GatedDrafter, PolicyScheduler
from specmon.sched.turns import Lane, lanes as make_lanes, rotated, take_turns


def prompt_phases(prompts: Sequence[Prompt]) -> dict[str, str]:
    """Each prompt's phase, where the set gives phases (a drift stream); else empty: per class."""
    return {p.id: p.phase for p in prompts if p.phase}


def prompt_half(prompt_id: str) -> str:
    """The fixed split of a prompt set: an id ending in an odd number is in the tuning half, an
    even one in the test half; an id without a number goes by the parity of its CRC-32."""
    number = re.search(r"(\d+)$", prompt_id)
    odd = int(number.group(1)) % 2 == 1 if number else zlib.crc32(prompt_id.encode()) % 2 == 1
    return "tune" if odd else "test"


def shipped_prompts(name: str) -> Path | None:
    """A prompt set shipped with specmon (`bench`: specmon/data/prompts/bench.jsonl), or None."""
    packaged = resources.files("specmon.data") / "prompts" / f"{name.removesuffix('.jsonl')}.jsonl"
    return Path(str(packaged)) if packaged.is_file() else None


def bench_prompts(args) -> list:
    """--prompts (a file or a shipped set's name), --classes and --half."""
    prompts = prompt_set(prompts_path(args.prompts), args.classes)
    if args.half:
        prompts = [p for p in prompts if prompt_half(p.id) == args.half]
        if not prompts:
            raise SpecmonError(f"--half {args.half}: no prompt of the set is in that half")
    return prompts


def prompts_path(given: Path | None) -> Path | None:
    """--prompts FILE, or a shipped set's name (`bench`) when no such file exists here."""
    if given is None or given.exists() or len(given.parts) > 1:
        return given
    return shipped_prompts(str(given)) or given


def run_bench(
    policy: PolicyScheduler,
    prompts: Sequence[Prompt],
    ks: Sequence[int],
    repeat: int,
    sampling: Sampling,
    max_new_tokens: int,
    fixed_passes: int = 0,
    on_prompt: Callable[[int], None] | None = None,
) -> None:
    """`fixed_passes` > 0 keeps the fixed k > 0 to the first passes (slow drafters); plain still
    runs beside every policy prompt, so auto/plain stays paired."""
    driver = policy.driver
    driver.check_room(prompts, max_new_tokens, GatedDrafter.max_draft_len)
    lanes = make_lanes(driver, [policy.drafter] * (len(ks) + 1))
    runs: list[int | None] = [None, *ks]  # None: the policy's own, which takes each place in turn as every k does
    for index, prompt in enumerate(list(prompts) * repeat):
        tag = prompt.prompt_class if prompt.prompt_class != "default" else None  # as the policy's own decode reads it
        name = policy.engine.classify(prompt.text, tag)[0]
        late = fixed_passes and index // len(prompts) >= fixed_passes  # a pass after those fixed k > 0 run in
        order = [k for k in rotated(runs, index) if not (k and late)]
        arms = lanes or [Lane(driver, policy.drafter)] * len(order)  # an un-forked Lane holds nothing to flush
        decodes = [_arm(policy, arm, prompt, name, k, sampling, max_new_tokens) for arm, k in zip(arms, order)]
        if lanes is None:
            for decode in decodes:  # one after another
                drain(decode)
        else:
            take_turns(decodes)
        for arm in arms:
            arm.flush(driver.emit)
        if on_prompt:
            on_prompt(index + 1)


def _arm(
    policy: PolicyScheduler,
    arm: Lane,
    prompt: Prompt,
    name: str,
    k: int | None,
    sampling: Sampling,
    max_new_tokens: int,
) -> Generator[int, None, object]:
    """One decode of the prompt: the policy's (k None) or at fixed k with the profile's drafter, as `run -k` has it."""
    driver, drafter = arm.driver, arm.drafter
    if k is None:
        return (yield from policy.decode_steps(prompt, sampling, max_new_tokens, driver, drafter))
    getattr(drafter, "confident", lambda *a: None)(0)  # fixed k: the plain lookup, as `specmon run -k K` drafts
    done = yield from driver.decode_steps(
        prompt,
        drafter if k else NoDrafter(),
        FixedDraftLen(k),
        sampling,
        max_new_tokens,
        prompt_class=name,
        class_rule=f"{BENCH_FIXED_RULE}{k}",
        bench_k=k,
    )
    driver.finish(done, UNCHECKED)
    return done


@dataclass
class BenchClass:
    auto: RunStats = field(default_factory=lambda: RunStats(-1))
    fixed: dict[int, RunStats] = field(default_factory=dict)
    auto_rounds_by_k: dict[int, int] = field(default_factory=dict)  # where the policy's rounds went
    explored: RunStats = field(default_factory=lambda: RunStats(-1))  # the policy's rounds that verified a cut draft

    @property
    def host(self) -> HostTally:
        """Every round of the class, the policy's and each fixed k's, as the host disturbed them."""
        return sum((r.host for r in self.fixed.values()), self.auto.host)

    @property
    def plain(self) -> float | None:
        return self.fixed[0].tok_per_s if 0 in self.fixed else None

    @property
    def best_k(self) -> int | None:
        rated = {k: r.tok_per_s for k, r in self.fixed.items() if r.tok_per_s is not None}
        return max(rated, key=rated.get) if rated else None

    def auto_over_best(self) -> SpeedupEstimate | None:
        """auto / best fixed k with its 95% interval over prompts, paired (each prompt ran both)."""
        best = self.best_k
        if best is None:
            return None
        return speedup_estimate(self.auto.prompt_totals, self.fixed[best].prompt_totals)

    def explore_cost(self) -> float | None:
        """What exploring cost, as a share of the policy's round time: the explored rounds' time
        less what plain steps take for the tokens they gave (negative: exploring paid)."""
        if not self.explored.emitted or not self.plain or not self.auto.round_ms:
            return 0.0 if not self.explored.emitted else None
        return (self.explored.round_ms - self.explored.emitted * 1e3 / self.plain) / self.auto.round_ms

    def to_json(self) -> dict:
        best = self.best_k
        best_rate = self.fixed[best].tok_per_s if best is not None else None
        paired, host = self.auto_over_best(), self.host
        return {
            "plain": self.plain,
            "fixed": {str(k): r.tok_per_s for k, r in sorted(self.fixed.items())},
            "best_k": best,
            "auto": self.auto.tok_per_s,
            "auto_over_best": speedup(self.auto.tok_per_s, best_rate),
            "auto_over_plain": speedup(self.auto.tok_per_s, self.plain),
            "best_over_plain": speedup(best_rate, self.plain),
            "auto_over_best_interval": None if paired is None or paired.low is None else [paired.low, paired.high],
            "auto_rounds_by_k": {str(k): n for k, n in sorted(self.auto_rounds_by_k.items())},
            "explored_rounds": self.explored.rounds,
            "explore_cost": self.explore_cost(),
            "disturbed_rounds": host.disturbed,
            "measured_rounds": host.measured,
        }


def bench_results(events: Iterable[AnyEvent], phases: Mapping[str, str] | None = None) -> dict[str, BenchClass]:
    """Per class (per phase, where `phases` gives each prompt id's): goodput of the policy's rounds
    and of each fixed k, from a bench session's events."""
    classes: dict[str, BenchClass] = {}
    opened: PromptStarted | None = None  # a round belongs to the prompt run that opened it
    for ev in events:
        if isinstance(ev, PromptStarted):
            opened = ev
        elif isinstance(ev, RoundVerified) and opened is not None:
            key = phases.get(opened.prompt_id, ev.prompt_class) if phases else ev.prompt_class
            entry = classes.setdefault(key, BenchClass())
            if bench_fixed_k(opened) is not None:
                entry.fixed.setdefault(ev.draft_len, RunStats(ev.draft_len)).add_round(ev)
            else:
                entry.auto.add_round(ev)
                if ev.explored:
                    entry.explored.add_round(ev)
                entry.auto_rounds_by_k[ev.draft_len] = entry.auto_rounds_by_k.get(ev.draft_len, 0) + 1
    return classes


def overall_figures(results: dict[str, BenchClass], ks: Sequence[int]) -> dict:
    """Every class together: the policy's goodput against each single fixed k applied to every
    class, and auto/best single's paired 95% interval over all prompts."""
    auto = _tok_per_s([c.auto for c in results.values()])
    fixed = {k: rate for k in ks if (rate := _tok_per_s([c.fixed[k] for c in results.values() if k in c.fixed]))}
    best = max(fixed, key=fixed.get, default=None)
    paired = None
    if best is not None:
        runs = [c.fixed[best] for c in results.values() if best in c.fixed]
        paired = speedup_estimate(_pooled([c.auto for c in results.values()]), _pooled(runs))
    return {
        "auto": auto,
        "fixed": {str(k): v for k, v in fixed.items()},
        "best_k": best,
        "best": fixed.get(best),
        "auto_over_best": speedup(auto, fixed.get(best)),
        "auto_over_best_interval": None if paired is None or paired.low is None else [paired.low, paired.high],
    }


def _tok_per_s(runs: list[RunStats]) -> float | None:
    """Several runs' goodput together, in tokens per second; None where they emitted nothing."""
    rate = goodput(sum(r.emitted for r in runs), sum(r.round_ms for r in runs))
    return rate * 1e3 if rate else None


def _pooled(runs: list[RunStats]) -> PromptTotals:
    """Several classes' per-prompt totals as one (a prompt falls in one class)."""
    totals = [r.prompt_totals for r in runs]
    return PromptTotals(
        {p: n for t in totals for p, n in t.emitted.items()}, {p: ms for t in totals for p, ms in t.ms.items()}
    )
