"""The round loop: draft k, verify k+1 positions in one target pass, accept, roll back, emit.

Plain decoding is the same loop with a drafter that proposes nothing (k = 0), so the baseline
is measured by the same code in the same run.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Callable, Generator, Sequence, TypeVar

import numpy as np

from specmon.engine.accept import accept_greedy, accept_sampled, alpha_hat
from specmon.engine.draft_len import DraftLenSource
from specmon.engine.drafters import Drafter, Proposal
from specmon.engine.sampling import probs_from_logits
from specmon.engine.target import Target
from specmon.errors import SpecmonError
from specmon.events.schema import RoundVerified, Sampling, StopReason
from specmon.metrics.rates import round_ms
from specmon.telemetry.host import stall_ms

T = TypeVar("T")


@dataclass
class PromptRun:
    """What one prompt's decode produced; the events hold the same, round by round."""

    generated: list[int] = field(default_factory=list)
    margins: list[float] = field(default_factory=list)  # per generated token
    rounds: int = 0
    prefill_ms: float = 0.0
    decode_ms: float = 0.0
    stop_reason: StopReason = "max_new_tokens"


@dataclass
class RoundContext:
    session_id: str
    prompt_id: str
    prompt_class: str
    round_ids: itertools.count  # shared across the session so round ids are unique
    detokenize: Callable[[list[int]], str] | None = None  # puts readable text into the events
    end_ids: tuple[int, ...] | None = None  # tokens that end the decode; None: the target's eos
    min_tokens: int = 0  # end tokens are masked from the target's rows until this many tokens are generated
    stall: Callable[[], float | None] | None = None  # the host's running stall total, µs (telemetry.host)

    def ends(self, eos_id: int) -> frozenset[int]:
        return frozenset((eos_id,) if self.end_ids is None else self.end_ids)


def _text_after(detokenize, context: list[int], new: list[int]) -> str:
    """Text that `new` adds after `context`, decoded with a few tokens of left context so
    byte-level pieces and leading spaces come out as they will in the full text."""
    if detokenize is None or not new:
        return ""
    left = context[-4:]
    return detokenize(left + new)[len(detokenize(left)) :]


def drain(steps: Generator[int, None, T]) -> T:
    """Run a round-by-round generator to its end; its return value."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def prompt_rounds(
    target: Target,
    drafter: Drafter,
    prompt: Sequence[int],
    draft_len: DraftLenSource,
    sampling: Sampling,
    max_new_tokens: int,
    ctx: RoundContext,
    emit: Callable[[RoundVerified], None],
    stop: Callable[[], str | None] | None = None,
) -> Generator[int, None, PromptRun]:
    """Decode one prompt, emitting one RoundVerified per round and then yielding the tokens generated so far
    (so decodes on their own KV caches can take turns). Only SessionDriver.decode_steps calls it. `draft_len`
    is asked before every round (a policy may change k mid-prompt); a reason `stop` gives ends the decode."""
    check_room(target, ctx.prompt_id, len(prompt), max_new_tokens, draft_len.max_draft_len)
    rng = np.random.default_rng(sampling.seed)
    drafter.begin(prompt)
    context = list(prompt)
    run = PromptRun()
    start = time.perf_counter()
    target.prefill(context[:-1])  # prefill all but the last token, which the first round feeds
    run.prefill_ms = (time.perf_counter() - start) * 1e3
    carried_ms = 0.0  # time spent emitting the previous event, charged to this round's overhead
    ends = ctx.ends(target.eos_id)
    while len(run.generated) < max_new_tokens:
        event = _one_round(
            target, drafter, context, draft_len.next_draft_len(), sampling, rng, max_new_tokens, run, ctx
        )
        event.overhead_ms += carried_ms
        run.decode_ms += round_ms(event)
        start = time.perf_counter()
        emit(event)
        carried_ms = (time.perf_counter() - start) * 1e3
        if run.generated and run.generated[-1] in ends:
            run.stop_reason = "eos"
            break
        reason = stop() if stop is not None else None
        if reason:
            run.stop_reason = reason
            break
        yield len(run.generated)
    return run


def check_room(target: Target, prompt_id: str, prompt_len: int, max_new_tokens: int, max_draft_len: int) -> None:
    """The KV cache holds the prompt, every new token and one round's draft plus its verify position."""
    if prompt_len + max_new_tokens + max_draft_len + 1 > target.max_len:
        raise SpecmonError(  # a policy run's longest draft is any k a reload may set
            f"prompt {prompt_id!r}: {prompt_len} prompt + {max_new_tokens} new + {max_draft_len} draft + 1 "
            f"verify positions exceed the cache's {target.max_len} (draft: the longest k this run may ask for); "
            f"ask for fewer new tokens (the prompt's max_new_tokens or --max-new-tokens), shorten the prompt, "
            f"or raise max_seq_len in the profile"
        )


def _one_round(target, drafter, context, draft_len, sampling, rng, max_new_tokens, run, ctx) -> RoundVerified:
    stalled = ctx.stall() if ctx.stall else None
    t0 = time.perf_counter()
    proposal: Proposal = drafter.propose(context, draft_len, sampling, rng)
    t1 = time.perf_counter()
    base = len(context) - 1  # position of the last token, not yet in the target's cache
    logits = target.forward([context[-1], *proposal.tokens], base)
    ends = ctx.ends(target.eos_id)
    logits = _mask_ends(logits, ends, ctx.min_tokens - len(run.generated))
    t2 = time.perf_counter()
    top = logits.argmax(axis=-1)  # each row's greedy token: acceptance, margins and p(x) all start from it
    p = None if sampling.greedy else probs_from_logits(logits, sampling)  # greedy needs only the argmaxes
    if p is None:
        verdict = accept_greedy(proposal.tokens, top)
    else:
        verdict = accept_sampled(proposal.tokens, p, proposal.q, rng)
    target.truncate(base + verdict.accepted + 1)  # roll back past the first rejected token
    new_tokens = [*proposal.tokens[: verdict.accepted], verdict.next_token]
    new_tokens = _trim(new_tokens, max_new_tokens - len(run.generated), ends)
    margins = _logit_margins(logits[: len(new_tokens)], top)
    n_accepted = min(verdict.accepted, len(new_tokens))
    accepted_text = _text_after(ctx.detokenize, context, new_tokens[:n_accepted])
    final_text = _text_after(ctx.detokenize, context + new_tokens[:n_accepted], new_tokens[n_accepted:])
    context.extend(new_tokens)
    run.generated.extend(new_tokens)
    run.margins.extend(margins)
    index, run.rounds = run.rounds, run.rounds + 1
    event = RoundVerified(
        session_id=ctx.session_id,
        t=time.time(),
        round_id=next(ctx.round_ids),
        prompt_id=ctx.prompt_id,
        prompt_class=ctx.prompt_class,
        round_index=index,
        draft_len=draft_len,
        proposed=proposal.tokens,
        accepted=verdict.accepted,
        rejection_pos=verdict.rejection_pos(len(proposal.tokens)),
        emitted=new_tokens,
        draft_ms=(t1 - t0) * 1e3,
        verify_ms=(t2 - t1) * 1e3,
        overhead_ms=0.0,
        target_probs=_target_probs(logits, top, p, proposal.tokens),
        alpha_hat=alpha_hat(p, proposal.q, proposal.tokens) if p is not None else _greedy_alpha(top, proposal),
        margins=margins,
        sampling=sampling,
        mem_bytes=target.memory_bytes(),
        accepted_text=accepted_text,
        final_text=final_text,
        matched=proposal.matched,
        explored=proposal.explored,
        cut=proposal.cut,
    )
    event.overhead_ms = (time.perf_counter() - t2) * 1e3
    event.host_stall_ms = stall_ms(stalled, ctx.stall()) if ctx.stall else None
    return event


def _trim(tokens: list[int], room: int, ends: frozenset[int]) -> list[int]:
    """Stop at max_new_tokens and at the first end token (the end-of-sequence token by default)."""
    tokens = tokens[:room]
    end = next((i for i, t in enumerate(tokens) if t in ends), None)
    return tokens if end is None else tokens[: end + 1]


def _mask_ends(logits: np.ndarray, ends: frozenset[int], rows: int) -> np.ndarray:
    """min_tokens: the first `rows` positions may not end the reply. Only p changes, the same in a
    plain step and a verify pass, so the accept rule still preserves it (a drafted end token is rejected)."""
    if rows <= 0 or not ends:
        return logits
    logits = np.array(logits, copy=True)
    logits[:rows, sorted(ends)] = -np.inf
    return logits


def _logit_margins(rows: np.ndarray, top: np.ndarray) -> list[float]:
    """Top-1 minus top-2 logit per row: how close a greedy choice was to a tie. The runner-up is
    the largest logit either side of the argmax: two reads of the row, where a partition of a
    49k vocabulary cost ~50 us a row."""
    margins = []
    for row, best in zip(rows, top.tolist()):
        second = max(row[:best].max(initial=-np.inf), row[best + 1 :].max(initial=-np.inf))
        margins.append(float(row[best] - second))
    return margins


def _target_probs(logits: np.ndarray, top: np.ndarray, p: np.ndarray | None, proposed: list[int]) -> list[float]:
    """p(x) of each proposed token; under greedy, the plain softmax (temperature 1), in float32
    from the row's peak (a recorded figure: float64 over the vocabulary cost ~0.4 ms a row)."""
    if not proposed:
        return []
    rows = np.arange(len(proposed))
    if p is not None:
        return p[rows, proposed].astype(float).tolist()
    head = logits[: len(proposed)]
    peak = head[rows, top[: len(proposed)]]
    shifted = np.subtract(head, peak[:, None], dtype=np.float32)
    z = np.exp(shifted, out=shifted).sum(axis=-1, dtype=np.float64)
    return (np.exp((head[rows, proposed] - peak).astype(np.float64)) / z).tolist()


def _greedy_alpha(top: np.ndarray, proposal: Proposal) -> float | None:
    """Under greedy p and q are one-hot, so sum min(p, q) is 1 where the argmaxes agree."""
    if not proposal.tokens:
        return None
    agree = top[: len(proposal.tokens)] == np.asarray(proposal.tokens)
    return float(agree.mean())
