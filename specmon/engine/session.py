"""Run a prompt set: plain decoding and speculation on each prompt, interleaved, as events."""

from __future__ import annotations

import itertools
import os
import platform
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from specmon import __version__
from specmon.engine.drafters import Drafter, NoDrafter
from specmon.engine.equivalence import compare
from specmon.engine.prompts import Prompt
from specmon.engine.rounds import PromptRun, RoundContext, decode_prompt
from specmon.engine.target import Target
from specmon.events.schema import (
    AnyEvent, Equivalence, PromptFinished, PromptStarted, ResourceSample, Sampling, SessionStarted,
)
from specmon.telemetry.memory import rss_bytes, vram_bytes

Emit = Callable[[AnyEvent], None]


class Tokenizer(Protocol):
    def encode_chat(self, user_text: str) -> list[int]: ...
    def decode(self, ids: list[int]) -> str: ...


@dataclass
class RunSettings:
    draft_len: int
    sampling: Sampling
    max_new_tokens: int
    near_tie_margin: float


def new_session_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


def host_facts() -> dict[str, str]:
    return {"hostname": platform.node(), "platform": platform.platform(),
            "python": platform.python_version(), "cpus": str(os.cpu_count())}


def session_started(session_id: str, profile, drafter: Drafter, target: Target) -> SessionStarted:
    return SessionStarted(
        session_id=session_id, t=time.time(), specmon_version=__version__, profile_name=profile.name,
        profile_text=profile.text, backend=profile.backend, target=target.name, drafter=drafter.name,
        dtype=profile.dtype, device=profile.device, host=host_facts(),
        cache_bytes={**target.cache_bytes(), **getattr(drafter, "cache_bytes", dict)()},
    )


def run_prompts(session_id: str, target: Target, drafter: Drafter, tokenizer: Tokenizer,
                prompts: Sequence[Prompt], settings: RunSettings, emit: Emit,
                on_prompt: Callable[[int], None] | None = None) -> None:
    """For each prompt, decode plainly (k = 0) and speculatively, alternating which goes first
    so that drift in the machine's speed falls on both equally."""
    round_ids = itertools.count()
    plain = NoDrafter()
    for index, prompt in enumerate(prompts):
        tokens = tokenizer.encode_chat(prompt.text)
        limit = prompt.max_new_tokens or settings.max_new_tokens
        order = [(0, plain), (settings.draft_len, drafter)] if settings.draft_len else [(0, plain)]
        if index % 2:
            order.reverse()
        runs: dict[int, tuple[PromptStarted, PromptRun]] = {}
        for draft_len, which in order:
            runs[draft_len] = _decode(session_id, target, which, tokens, prompt, draft_len, limit,
                                      settings.sampling, round_ids, emit, tokenizer.decode)
        _finish_pair(session_id, prompt, runs, tokenizer, settings, emit)
        if on_prompt:
            on_prompt(index + 1)


def _decode(session_id, target, drafter, tokens, prompt, draft_len, limit, sampling, round_ids,
            emit, detokenize) -> tuple[PromptStarted, PromptRun]:
    started = PromptStarted(
        session_id=session_id, t=time.time(), prompt_id=prompt.id, prompt_class=prompt.prompt_class,
        draft_len=draft_len, drafter=drafter.name, sampling=sampling, prompt_tokens=len(tokens),
        max_new_tokens=limit, class_rule="prompt set",
    )
    emit(started)
    ctx = RoundContext(session_id, prompt.id, prompt.prompt_class, round_ids, detokenize)
    return started, decode_prompt(target, drafter, tokens, draft_len, sampling, limit, ctx, emit)


def _finish_pair(session_id, prompt, runs, tokenizer, settings: RunSettings, emit: Emit) -> None:
    plain = runs[0][1]
    for draft_len, (_, run) in runs.items():
        if draft_len == 0:
            verdict = Equivalence("baseline")
        else:
            verdict = compare(plain.generated, plain.margins, run.generated,
                              settings.sampling.greedy, settings.near_tie_margin)
        emit(PromptFinished(
            session_id=session_id, t=time.time(), prompt_id=prompt.id, prompt_class=prompt.prompt_class,
            draft_len=draft_len, rounds=run.rounds, generated=run.generated,
            text=tokenizer.decode(run.generated), stop_reason=run.stop_reason,
            prefill_ms=run.prefill_ms, decode_ms=run.decode_ms, equivalence=verdict,
        ))
    used, total = vram_bytes()
    emit(ResourceSample(session_id=session_id, t=time.time(), rss_bytes=rss_bytes(),
                        vram_used_bytes=used, vram_total_bytes=total))
