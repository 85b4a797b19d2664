"""`specmon policy tune`: replay the greedy texts of a `specmon bench policy` log under a policy and
under every fixed k, with round costs from a model, so a policy is tuned without timing noise.

Greedy decoding emits the same tokens at every k, so what each round proposes (the n-gram drafter
as the policy sets it) and accepts is exact; only its time is modelled: a round that
proposes L tokens costs cost(L) plain steps (cost(0) = 1). The rounds run through the one session
driver (fixed k) and PolicyScheduler (the policy), on a ReplayTarget whose logits peak at the
logged plain text's next token, so the real PolicyEngine cuts drafts, learns and decides
on them exactly as it would live, were timing exact."""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from specmon.engine.costs import Costs
from specmon.engine.draft_len import FixedDraftLen
from specmon.engine.drafters import NgramDrafter, NoDrafter
from specmon.engine.driver import UNCHECKED, SessionDriver
from specmon.engine.prompts import Prompt
from specmon.errors import SpecmonError
from specmon.events.log import read_log
from specmon.events.schema import (
    AnyEvent,
    PromptFinished,
    PromptStarted,
    RoundVerified,
    Sampling,
    SessionStarted,
    bench_fixed_k,
)
from specmon.metrics.rates import goodput, round_ms, speedup
from specmon.policy.engine import PolicyEngine
from specmon.policy.schema import Policy
from specmon.sched.policy import PolicyScheduler

STEP_MS = 40.0  # one modelled plain step: any constant gives the same ratios
PACKED_ROWS = 9  # rows of a padded verify pass, as the embedded model's packed weights run it
PEAK = 30.0  # the logit of the logged token; every other logit is 0
MIN_FIT_ROUNDS = 5  # rounds of one proposal length before the log's own cost for it is trusted
GREEDY = Sampling()


@dataclass
class BenchLog:
    """What a tuning replay takes from a bench log: each prompt's plain greedy tokens, its prompt
    length as logged (to check the prompt set and tokenizer), the fitted costs and pad_from."""

    texts: dict[str, list[int]] = field(default_factory=dict)
    prompt_tokens: dict[str, int] = field(default_factory=dict)
    costs: dict[int, float] = field(default_factory=dict)
    pad_from: int = 0


def read_bench_log(log: Path) -> BenchLog:
    """The plain runs of a `bench policy` log (PromptStarted.bench_k == 0), and cost(L): as measured at
    load (the session header), or in an older log fitted on its rounds (fitted_costs)."""
    found, rounds = BenchLog(), []
    opened: PromptStarted | None = None
    measured: dict[int, float] = {}
    for ev in read_log(log):
        if isinstance(ev, SessionStarted):
            found.pad_from = int(ev.host.get("pad_from", 0))  # 0: no packed weights, or an older log
            measured = {n: ms / ev.verify_ms[0] for n, ms in enumerate(ev.verify_ms) if n}  # the costs at load
        elif isinstance(ev, PromptStarted):
            opened = ev
        elif isinstance(ev, PromptFinished) and opened is not None and bench_fixed_k(opened) == 0:
            if not opened.sampling.greedy:
                raise SpecmonError(
                    f"{log}: its plain runs were sampled (temperature {opened.sampling.temperature:g}); "
                    "the tuning replay needs a greedy `specmon bench policy` log"
                )
            found.texts[ev.prompt_id] = ev.generated
            found.prompt_tokens[ev.prompt_id] = opened.prompt_tokens
        elif isinstance(ev, RoundVerified):
            rounds.append(ev)
    if not found.texts:
        raise SpecmonError(
            f"{log}: not a `specmon bench policy` log (no plain bench decodes to replay); "
            "make one with `specmon bench policy --log FILE`"
        )
    found.costs = measured or fitted_costs(rounds)  # an older log: fitted on its rounds
    return found


def fitted_costs(rounds: Sequence[RoundVerified]) -> dict[int, float]:
    """cost(L) in plain steps, from a log that measured no curve at load: each round of L proposed
    tokens over its prompt's median plain step (a round that proposed nothing), averaged per L
    (MIN_FIT_ROUNDS rounds or more)."""
    plain_ms, by_len = defaultdict(list), defaultdict(list)
    for ev in rounds:
        if not ev.proposed:
            plain_ms[ev.prompt_id].append(round_ms(ev))
    step = {p: statistics.median(v) for p, v in plain_ms.items()}
    for ev in rounds:
        if ev.proposed and ev.prompt_id in step:
            by_len[len(ev.proposed)].append(round_ms(ev) / step[ev.prompt_id])
    return {n: statistics.mean(v) for n, v in by_len.items() if len(v) >= MIN_FIT_ROUNDS}


def cost_of(costs: dict[int, float]) -> Callable[[int], float]:
    """cost(L) in plain steps, interpolated between measured L (held at the ends); cost(0) = 1."""
    known = sorted(costs)
    return lambda n: 1.0 if n == 0 else float(np.interp(n, known, [costs[x] for x in known]))


class ReplayTarget:
    """A Target that knows the text being decoded: row i of forward() peaks at the token the logged
    plain decode put after position start+i, so greedy acceptance is exact; the end-of-sequence
    token past the text's end."""

    name = "replay"

    def __init__(self, vocab_size: int, eos_id: int, max_len: int = 1 << 20):
        self.vocab_size, self.eos_id, self.max_len = vocab_size, eos_id, max_len
        self.sequence: list[int] = []  # the prompt's tokens, then its logged plain text: what the next decode sees

    def prefill(self, tokens: Sequence[int]) -> None:
        if list(tokens) != self.sequence[: len(tokens)]:
            raise SpecmonError("replay: the prompt decoded is not the one played")  # a caller's bug, said plainly

    def forward(self, tokens: Sequence[int], start: int) -> np.ndarray:
        rows = np.zeros((len(tokens), self.vocab_size), dtype=np.float32)
        ahead = (self.sequence[start + 1 : start + 1 + len(tokens)] + [self.eos_id] * len(tokens))[: len(tokens)]
        rows[np.arange(len(tokens)), ahead] = PEAK
        return rows

    def truncate(self, length: int) -> None:
        """Nothing is cached: forward() reads the played sequence."""

    def memory_bytes(self) -> int:
        return 0

    def cache_bytes(self) -> dict[str, int]:
        return {}


class ModelledRounds:
    """The replay driver's emit: sets each round's time from the cost model, and sums emitted tokens
    and ms per class and per run (`key`: "auto" or a fixed k)."""

    def __init__(self, cost: Callable[[int], float]):
        self.cost = cost
        self.key: str | int = "auto"
        self.totals: dict[str, dict] = defaultdict(lambda: defaultdict(lambda: [0, 0.0]))

    def __call__(self, event: AnyEvent) -> None:
        if not isinstance(event, RoundVerified):
            return
        # The driver emits a round before its on_round observers run, so the policy decides on this modelled time.
        event.draft_ms, event.verify_ms, event.overhead_ms = 0.0, STEP_MS * self.cost(len(event.proposed)), 0.0
        cell = self.totals[event.prompt_class][self.key]
        cell[0] += len(event.emitted)
        cell[1] += event.verify_ms


def padded_rows(pad_from: int) -> Callable[[int, int], int] | None:
    """A target whose verify passes of pad_from..PACKED_ROWS positions run as PACKED_ROWS rows (a
    confident draft fills them, as it does live); None (0): drafts stop at their match."""
    if not pad_from:
        return None
    return lambda n, start: PACKED_ROWS if pad_from <= n <= PACKED_ROWS else n


@dataclass
class Tuned:
    totals: dict[str, dict]  # class -> run ("auto" or k) -> [emitted, ms]
    decisions: int


def replay(
    policy: Policy,
    prompts: Sequence[Prompt],
    bench: BenchLog,
    tokenizer,
    cost: Callable[[int], float],
    pad_from: int,
    ks: Sequence[int],
    repeat: int,
    on_prompt: Callable[[int], None] | None = None,
) -> Tuned:
    """Each prompt under the policy, then at every fixed k (the plain n-gram lookup, as `specmon run -k K`
    drafts), `repeat` passes over the set, in order."""
    encoded = {p.id: tuple(tokenizer.encode_chat(p.text)) for p in prompts}
    every = [t for ids in encoded.values() for t in ids] + [t for p in prompts for t in bench.texts[p.id]]
    target = ReplayTarget(max([tokenizer.eos_id, *every]) + 1, tokenizer.eos_id)  # drafts come from these tokens
    modelled = ModelledRounds(cost)
    driver = SessionDriver("tune", target, tokenizer, modelled, 0.0)
    drafter = NgramDrafter(verify_rows=padded_rows(pad_from))
    longest = max([c.draft_len for c in policy.classes] + list(ks))
    costs = Costs(tuple(STEP_MS * cost(t) for t in range(longest + 1)))  # the engine's costs: the model's
    scheduler = PolicyScheduler(driver, PolicyEngine(policy, "tune", costs), drafter, on_reload=None)
    for index, prompt in enumerate(list(prompts) * repeat):
        text = bench.texts[prompt.id]
        played = replace(prompt, max_new_tokens=len(text), token_ids=encoded[prompt.id])
        target.sequence = list(played.token_ids) + text
        modelled.key = "auto"
        name = scheduler.decode(played, GREEDY, len(text)).started.prompt_class
        for k in ks:
            modelled.key = k
            drafter.confident(0)  # fixed k: the plain lookup, as `specmon run -k K` drafts
            done = driver.decode(
                played, drafter if k else NoDrafter(), FixedDraftLen(k), GREEDY, len(text), prompt_class=name, bench_k=k
            )
            driver.finish(done, UNCHECKED)
        if on_prompt:
            on_prompt(index + 1)
    return Tuned(modelled.totals, next(scheduler.engine.decision_ids))  # ids count from 0: the next is how many


def check_prompts(prompts: Sequence[Prompt], bench: BenchLog, tokenizer, log: Path) -> None:
    """The prompt set and tokenizer are the log's: each prompt has as many tokens as it had there."""
    if not prompts:
        raise SpecmonError(
            f"{log}: no prompt of the set has a plain run in the log; give --prompts as given "
            "to `specmon bench policy` (and the same --half)"
        )
    for p in prompts:
        have, logged = len(tokenizer.encode_chat(p.text)), bench.prompt_tokens[p.id]
        if have != logged:
            raise SpecmonError(
                f"prompt {p.id!r}: {have} tokens here but {logged} in {log}: --prompts or "
                "--profile is not what the log ran"
            )


def figures(tuned: Tuned, ks: Sequence[int]) -> dict:
    """Goodput over plain per class for each k and the policy; auto against the best k per class
    and against the best single k over all classes (plain included, as `bench policy` has it)."""
    classes, pooled = {}, defaultdict(lambda: [0, 0.0])
    for name, runs in sorted(tuned.totals.items()):
        rate = {key: goodput(emitted, ms) for key, (emitted, ms) in runs.items()}
        for key, (emitted, ms) in runs.items():
            pooled[key][0] += emitted
            pooled[key][1] += ms
        best = max(ks, key=rate.get)
        classes[name] = {
            "over_plain": {str(k): speedup(rate[k], rate[0]) for k in ks},
            "auto_over_plain": speedup(rate["auto"], rate[0]),
            "best_k": best,
            "auto_over_best": speedup(rate["auto"], rate[best]),
        }
    rate = {key: goodput(emitted, ms) for key, (emitted, ms) in pooled.items()}
    best = max(ks, key=rate.get)
    return {
        "classes": classes,
        "overall": {"best_k": best, "auto_over_best": speedup(rate.get("auto"), rate.get(best))},
        "decisions": tuned.decisions,
    }
