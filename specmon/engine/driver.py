"""The one session driver: every scheduler (`run`'s pairing, the sweep, the policy, its benchmark,
`specmon serve`'s jobs) decodes its prompts through it. It owns the target, the tokenizer, the
session's round ids and the emit path, and runs one prompt at a time."""

from __future__ import annotations

import itertools
import os
import platform
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Generator, Protocol, Sequence

from specmon import __version__
from specmon.engine.draft_len import DraftLenSource
from specmon.engine.drafters import Drafter
from specmon.engine.prompts import Prompt
from specmon.engine.rounds import PromptRun, RoundContext, check_room, drain, prompt_rounds
from specmon.engine.target import Target
from specmon.events.schema import (
    AnyEvent,
    Equivalence,
    PromptFinished,
    PromptStarted,
    ResourceSample,
    RoundVerified,
    Sampling,
    SessionStarted,
)
from specmon.telemetry.host import StallClock
from specmon.telemetry.memory import gpu_other_processes, rss_bytes, vram_bytes

Emit = Callable[[AnyEvent], None]
BASELINE = Equivalence("baseline")
UNCHECKED = Equivalence("unchecked")
TOKENS_KEPT = 1024  # prompts whose tokens are kept: a whole prompt set, encoded once


class Cancelled(Exception):
    """The session was stopped (SessionDriver.stop): no further prompt starts."""


class Tokenizer(Protocol):
    def encode_chat(self, user_text: str) -> list[int]: ...
    def decode(self, ids: list[int]) -> str: ...


@dataclass
class Decoded:
    """One prompt decoded under one drafter and sampling setting: what opened it and what it made."""

    started: PromptStarted
    run: PromptRun


def new_session_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


def host_facts() -> dict[str, str]:
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": str(os.cpu_count()),
    }


def compare(
    plain: list[int], plain_margins: list[float], speculative: list[int], greedy: bool, near_tie_margin: float
) -> Equivalence:
    """Under greedy decoding the two must match token for token; a divergence where plain decoding's top-1
    and top-2 logits were closer than `near_tie_margin` is a near-tie (kernels rounding apart)."""
    if not greedy:
        return Equivalence("sampled", near_tie_margin=near_tie_margin)
    if plain == speculative:
        return Equivalence("identical", near_tie_margin=near_tie_margin)
    index = next((i for i, (a, b) in enumerate(zip(plain, speculative)) if a != b), min(len(plain), len(speculative)))
    margin = plain_margins[index] if index < len(plain_margins) else None
    verdict = "near-tie" if margin is not None and margin < near_tie_margin else "diverged"
    return Equivalence(verdict, first_divergence=index, margin=margin, near_tie_margin=near_tie_margin)


class SessionDriver:
    def __init__(self, session_id: str, target: Target, tokenizer: Tokenizer, emit: Emit, near_tie_margin: float):
        self.session_id = session_id
        self.target = target
        self.tokenizer = tokenizer
        self.emit: Emit = emit
        self.near_tie_margin = near_tie_margin
        self.round_ids = itertools.count()  # unique across the session: decisions cite them
        self._tokens: dict[str, list[int]] = {}
        self._stopped = threading.Event()  # shared with forks: one stop ends every lane
        self.stall = StallClock()  # how long the host made each round wait for a CPU

    def stop(self) -> None:
        """Cancel the session from any thread: the decode in flight ends after its round
        (stop_reason "cancelled", finished as usual), and any later decode raises Cancelled."""
        self._stopped.set()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def started_event(self, profile, drafter: Drafter) -> SessionStarted:
        """The session header: specmon version, profile text, models, host, cache sizes."""
        return SessionStarted(
            session_id=self.session_id,
            t=time.time(),
            specmon_version=__version__,
            profile_name=profile.name,
            profile_text=profile.text,
            backend=profile.backend,
            target=self.target.name,
            drafter=drafter.name,
            dtype=profile.dtype,
            device=profile.device,
            host={
                **host_facts(),
                "cpu_stall": self.stall.source or "none",
                **getattr(self.target, "host_facts", dict)(),
            },
            cache_bytes={**self.target.cache_bytes(), **getattr(drafter, "cache_bytes", dict)()},
        )

    def tokens(self, prompt: Prompt) -> list[int]:
        """The prompt's chat-template tokens, encoded once for check_room and every decode of it
        (or the ones it brings, already encoded: a server's chat or completion prompt)."""
        if prompt.token_ids is not None:
            return list(prompt.token_ids)
        if prompt.text not in self._tokens:
            if len(self._tokens) >= TOKENS_KEPT:  # a long-lived session (a server) must not grow without end
                self._tokens.clear()
            self._tokens[prompt.text] = self.tokenizer.encode_chat(prompt.text)
        return self._tokens[prompt.text]

    def check_room(self, prompts: Sequence[Prompt], max_new_tokens: int, max_draft_len: int) -> None:
        """Every prompt fits the KV cache, checked before the first round, not when its turn comes."""
        for prompt in prompts:
            check_room(
                self.target, prompt.id, len(self.tokens(prompt)), prompt.max_new_tokens or max_new_tokens, max_draft_len
            )

    def fork(self, emit: Emit) -> SessionDriver | None:
        """A driver in this session (same round ids) on a copy of the target with its own KV cache, emitting to
        `emit`, so decodes can take turns round by round; None where the target cannot be copied."""
        fork_target = getattr(self.target, "fork", None)
        if fork_target is None:
            return None
        twin = SessionDriver(self.session_id, fork_target(), self.tokenizer, emit, self.near_tie_margin)
        twin.round_ids, twin._tokens = self.round_ids, self._tokens
        twin._stopped, twin.stall = self._stopped, self.stall
        return twin

    def decode(self, *args, **options) -> Decoded:
        """decode_steps() run to its end. Call finish() after."""
        return drain(self.decode_steps(*args, **options))

    def decode_steps(
        self,
        prompt: Prompt,
        drafter: Drafter,
        draft_len: DraftLenSource,
        sampling: Sampling,
        max_new_tokens: int,
        *,
        prompt_class: str | None = None,
        class_rule: str = "prompt set",
        start_draft_len: int | None = None,
        bench_k: int | None = None,
        on_round: Callable[[RoundVerified], None] | None = None,
        stop: Callable[[], str | None] | None = None,
    ) -> Generator[int, None, Decoded]:
        """Decode one prompt, yielding after each round: PromptStarted, then its rounds (each handed to
        `on_round` after it is emitted, so a policy can observe it and decide before the next; then the
        session's stop, then `stop`, is asked whether to end here, e.g. a server's client left)."""
        if self.stopped:
            raise Cancelled
        tokens = self.tokens(prompt)
        limit = prompt.max_new_tokens or max_new_tokens
        name = prompt_class or prompt.prompt_class
        started = PromptStarted(
            session_id=self.session_id,
            t=time.time(),
            prompt_id=prompt.id,
            prompt_class=name,
            draft_len=draft_len.max_draft_len if start_draft_len is None else start_draft_len,
            drafter=drafter.name,
            sampling=sampling,
            prompt_tokens=len(tokens),
            max_new_tokens=limit,
            class_rule=class_rule,
            bench_k=bench_k,
        )
        self.emit(started)
        ctx = RoundContext(
            self.session_id,
            prompt.id,
            name,
            self.round_ids,
            self.tokenizer.decode,
            end_ids=prompt.end_ids,
            min_tokens=prompt.min_tokens,
            stall=self.stall.stall,
        )

        def emit(event: RoundVerified) -> None:
            self.emit(event)
            if on_round is not None:
                on_round(event)

        def stopped() -> str | None:  # the session's stop first, then the caller's
            if self._stopped.is_set():
                return "cancelled"
            return stop() if stop is not None else None

        run = yield from prompt_rounds(self.target, drafter, tokens, draft_len, sampling, limit, ctx, emit, stopped)
        return Decoded(started, run)

    def equivalence(self, plain: Decoded, done: Decoded) -> Equivalence:
        """Did `done` give plain decoding's tokens (greedy), with the logit margin where it left them?"""
        if done is plain:
            return BASELINE
        greedy = done.started.sampling.greedy
        return compare(plain.run.generated, plain.run.margins, done.run.generated, greedy, self.near_tie_margin)

    def finish(self, done: Decoded, equivalence: Equivalence) -> None:
        """PromptFinished for one decode."""
        s, run = done.started, done.run
        self.emit(
            PromptFinished(
                session_id=self.session_id,
                t=time.time(),
                prompt_id=s.prompt_id,
                prompt_class=s.prompt_class,
                draft_len=s.draft_len,
                rounds=run.rounds,
                generated=run.generated,
                text=self.tokenizer.decode(run.generated),
                stop_reason=run.stop_reason,
                prefill_ms=run.prefill_ms,
                decode_ms=run.decode_ms,
                equivalence=equivalence,
                drafter=s.drafter,
                sampling=s.sampling,
            )
        )

    def sample_resources(self) -> None:
        """A memory sample (RSS, VRAM or N/A): schedulers take one per prompt."""
        used, total = vram_bytes()
        self.emit(
            ResourceSample(
                session_id=self.session_id,
                t=time.time(),
                rss_bytes=rss_bytes(),
                vram_used_bytes=used,
                vram_total_bytes=total,
                gpu_others=gpu_other_processes() if used is not None else None,
            )
        )
