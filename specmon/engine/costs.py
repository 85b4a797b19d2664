"""The engine's own costs, measured once at load: a target pass over T = 1..N positions, and
a model drafter's cost per draft token. A policy weighs a draft's expected tokens against them,
so it decides right on any engine: a failed 8-token draft costs 1.6 plain steps on torch with
packed weights, 5.3 on llama.cpp's quantised kernels, barely more than one on a GPU."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

from specmon.errors import SpecmonError
from specmon.events.schema import Sampling
from specmon.telemetry.host import CONTENTION, StallClock, stall_ms

CONTEXT = 128  # tokens of context the passes run after: a short prompt's worth
REPS = 3  # passes per T, interleaved; the least is kept (a busy host only ever adds time)
EXTRA_ROUNDS = 6  # rounds more, at most, to time again what the host disturbed
FILLER = 5  # the token ids the timed passes verify: the cost does not depend on them


@dataclass(frozen=True)
class Costs:
    """verify_ms[T-1]: ms a target pass over T positions costs (T = 1 is a plain step; with T > 1 what the
    pass costs the plain step after it is included); draft_ms: a model drafter's ms per draft token."""

    verify_ms: tuple[float, ...]
    draft_ms: float = 0.0
    disturbed: int = 0  # points of the curve the host never let be timed quietly (timed busy instead)

    def steps(self, proposed: int) -> float:
        """A round that proposes `proposed` tokens, in plain steps: drafting them and verifying
        proposed + 1 positions. Past the measured T the last step's growth continues."""
        ms, last = self.verify_ms, len(self.verify_ms)
        if proposed + 1 <= last:
            verify = ms[proposed]
        else:
            slope = ms[-1] - ms[-2] if last >= 2 else ms[-1]
            verify = ms[-1] + slope * (proposed + 1 - last)
        return (verify + proposed * self.draft_ms) / ms[0]


def measure_costs(
    target,
    drafter=None,
    max_positions: int = 9,
    reps: int = REPS,
    context_len: int = CONTEXT,
    stall: Callable[[], float | None] | None = None,
    done: Callable[[int], None] | None = None,
) -> Costs:
    """Time the target (and a model drafter) as decoding runs it: a plain step right after another, and a
    pass over T positions with the plain step after it, less a plain step (an engine that reuses its last
    pass's graph, llama.cpp, rebuilds it on both sides of a draft round: a T = 4 round cost 3.0 steps in
    decoding, 3.0 timed so, 2.6 timed apart). One warm round of every shape, then the least of `reps`
    quiet timings (a disturbed one is retaken, up to EXTRA_ROUNDS more rounds). `done(n)` hears how many
    of timings_total(max_positions, reps) are done."""
    room = min(context_len, target.max_len - max_positions - 1)
    context = [(100 + i) % target.vocab_size for i in range(room)]
    target.prefill(context[:-1])
    base = len(context) - 1
    target.forward(context[-1:], base)  # the first timing starts after a plain step too
    target.truncate(base)
    stall = stall or StallClock().stall

    def timed(*shapes: int) -> tuple[float, bool]:
        """ms of the passes, and whether other work on the host held a CPU through enough of them."""
        before, start = stall(), time.perf_counter()
        for positions in shapes:
            target.forward(context[-1:] + [FILLER] * (positions - 1), base)
            target.truncate(base)
        ms = (time.perf_counter() - start) * 1e3
        lost = stall_ms(before, stall())
        return ms, lost is not None and lost >= CONTENTION * ms

    best = [float("inf")] * max_positions  # best[0]: a plain step; best[T-1]: a T pass and the step after it
    busy = [float("inf")] * max_positions  # the least disturbed timing: used only where no quiet one came
    quiet = [0] * max_positions
    total, taken = timings_total(max_positions, reps), 0
    for rep in range(reps + 1 + EXTRA_ROUNDS):
        for t in range(max_positions):
            if rep > reps and quiet[t] >= reps:
                continue
            # every timing ends on a plain step, so each starts after one, as in decoding
            ms, disturbed = timed(1) if t == 0 else timed(t + 1, 1)
            if rep and disturbed:  # rep 0 warms caches and kernels for every shape
                busy[t] = min(busy[t], ms)
            elif rep:
                best[t], quiet[t] = min(best[t], ms), quiet[t] + 1
            taken += 1
            if done:
                done(min(taken, total))
    disturbed = sum(not n for n in quiet)
    best = [b if n else d for b, d, n in zip(best, busy, quiet)]
    plain = best[0]
    # a pass over more positions never costs less than a plain step: a lower figure had a disturbed plain step
    verify = [plain, *(max(ms - plain, plain) for ms in best[1:])]
    for t in range(max_positions - 2, 0, -1):  # more positions never cost less: a dearer shorter pass was disturbed
        verify[t] = min(verify[t], verify[t + 1])
    return Costs(tuple(verify), _draft_ms(drafter, context, max_positions - 1), disturbed)


def timings_total(max_positions: int, reps: int = REPS) -> int:
    """The timings measure_costs takes on a quiet host: a warm round and `reps` of every shape."""
    return (reps + 1) * max_positions


def _draft_ms(drafter, context: Sequence[int], k: int) -> float:
    """A model drafter's ms per token (the least of REPS drafts of k); 0 for one that runs no model."""
    if drafter is None or drafter.name in ("ngram", "none") or k < 1:
        return 0.0
    import numpy as np

    rng, sampling, best = np.random.default_rng(0), Sampling(), float("inf")
    for _ in range(REPS + 1):
        drafter.begin(context)
        start = time.perf_counter()
        proposal = drafter.propose(list(context), k, sampling, rng)
        best = min(best, (time.perf_counter() - start) * 1e3 / max(1, len(proposal.tokens)))
    drafter.begin([])
    return best


def time_passes(targets: dict, context_len: int, reps: int, max_positions: int, done=None) -> dict:
    """ms of a pass over T = 1..max_positions positions after `context_len` tokens, per target, as
    measure_costs takes it; the least of `reps`, each over every target in turn, so drift falls on all alike."""
    for target in targets.values():
        if context_len + max_positions >= target.max_len:
            raise SpecmonError(
                f"--context {context_len} + --max-positions {max_positions} exceed the cache's "
                f"{target.max_len} positions (max_seq_len in the profile)"
            )
    best = {name: [float("inf")] * max_positions for name in targets}
    for rep in range(reps):
        for name, target in targets.items():
            curve = measure_costs(target, max_positions=max_positions, reps=1, context_len=context_len).verify_ms
            best[name] = [min(a, b) for a, b in zip(best[name], curve)]
        if done:
            done(rep + 1)
    return {name: {t: best[name][t - 1] for t in range(1, max_positions + 1)} for name in targets}
