"""The server's scheduler: admitted requests wait in one bounded FIFO queue, and one worker thread
decodes them one at a time (batch 1) through the session driver, at the policy's k round by round
or at a fixed k. Each round's text goes back to the request's event loop as it is verified; a
request whose client left is withdrawn from the queue, or stopped after the round in progress."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import math
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

from specmon.engine.draft_len import FixedDraftLen
from specmon.engine.driver import UNCHECKED, Decoded, SessionDriver
from specmon.engine.prompts import Prompt
from specmon.errors import SpecmonError
from specmon.events.schema import QueueSample, RoundVerified, Sampling
from specmon.metrics.rates import time_to_first_token_s
from specmon.policy.classify import UnknownClass
from specmon.server.classes import unknown_class
from specmon.server.errors import ApiError
from specmon.server.metrics import ServerMetrics
from specmon.server.protocol import SpecmonInfo, SpecmonRound, Usage
from specmon.server.text import ReplyText
from specmon.transport.channel import LogWriteFailed

IDLE_LOOK_S = 1.0  # an idle server looks at its policy file this often
FINISH_REASONS = {"eos": "stop", "stop": "stop", "max_new_tokens": "length", "cancelled": "cancelled"}


@dataclass
class Admitted:
    """A request that passed every check: what the worker needs to decode it."""

    id: str
    endpoint: str  # "chat" | "completion"
    prompt: Prompt  # text: what was classified; token_ids: what is decoded
    prompt_class: str  # as admitted; under a policy the decode classifies it again (the policy in force then)
    class_rule: str
    sampling: Sampling
    max_tokens: int
    stops: list[str]
    named: str | None = None  # the class the request named, if it did


@dataclass
class Piece:
    text: str
    round: SpecmonRound


@dataclass
class Finished:
    rest: str  # text not yet sent as a Piece
    text: str  # the whole reply
    finish_reason: str
    usage: Usage
    info: SpecmonInfo


@dataclass(eq=False)
class Job:
    request: Admitted
    loop: asyncio.AbstractEventLoop
    text: ReplyText
    out: asyncio.Queue = field(default_factory=asyncio.Queue)  # Piece* then Finished, or the ApiError that ended it
    cancelled: threading.Event = field(default_factory=threading.Event)
    arrived: float = field(default_factory=time.perf_counter)
    queued_at: float = field(default_factory=time.time)  # wall clock, as the log's times: TTFT counts from it
    rounds: list[RoundVerified] = field(default_factory=list)  # counted in /metrics when the request ends
    last_round_at: float | None = None
    ttft_s: float | None = None

    def post(self, item: Piece | Finished | ApiError) -> None:
        """From the worker thread to the request's event loop (gone once the server has stopped)."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: no one is waiting for this request any more
            self.loop.call_soon_threadsafe(self.out.put_nowait, item)


class Decoder:
    """Decodes one admitted request with the driver: the policy's k round by round, or a fixed k."""

    def __init__(self, driver: SessionDriver, drafter, policy=None, fixed_k: int = 0):
        self.driver, self.drafter, self.policy, self.fixed_k = driver, drafter, policy, fixed_k

    def decode(
        self, req: Admitted, on_round: Callable[[RoundVerified], None], stop: Callable[[], str | None]
    ) -> Decoded:
        if self.policy is not None:
            try:
                return self.policy.decode(
                    req.prompt, req.sampling, req.max_tokens, named=req.named, on_round=on_round, stop=stop
                )
            except UnknownClass as exc:  # a reload since admission removed the class it names
                raise unknown_class(exc) from None
        done = self.driver.decode(
            req.prompt,
            self.drafter,
            FixedDraftLen(self.fixed_k),
            req.sampling,
            req.max_tokens,
            prompt_class=req.prompt_class,
            class_rule=req.class_rule,
            on_round=on_round,
            stop=stop,
        )
        self.driver.finish(done, UNCHECKED)
        self.driver.sample_resources()
        return done


class Worker:
    """One decode at a time from a bounded FIFO queue. `max_queue` counts every request the server
    holds, the one decoding included: one more is answered 429 with Retry-After."""

    def __init__(
        self,
        decoder: Decoder,
        metrics: ServerMetrics,
        max_queue: int,
        on_done: Callable[[Job, Finished], None],
        on_fatal: Callable[[BaseException], None],
    ):
        self.decoder, self.metrics, self.max_queue = decoder, metrics, max_queue
        self.on_done, self.on_fatal = on_done, on_fatal
        self.waiting: collections.deque[Job] = collections.deque()
        self.in_flight: Job | None = None
        self.failure: BaseException | None = None
        self._cond = threading.Condition()
        self.closing = False  # refuse new work: the server is shutting down
        self._moved = False  # requests arrived or left since the last QueueSample
        self._mean_s = 1.0  # recent seconds per request, for Retry-After
        self.thread = threading.Thread(target=self._run, name="specmon-serve-decode", daemon=True)

    @property
    def held(self) -> int:
        return len(self.waiting) + (self.in_flight is not None)

    def submit(self, job: Job) -> None:
        """Queue a job, or refuse it: 429 when full, 503 once the server is closing."""
        with self._cond:
            if self.closing:
                raise ApiError(503, "the server is shutting down", type="server_error", code="shutting_down")
            if self.held >= self.max_queue:
                wait = max(1, math.ceil(self._mean_s * self.held))
                raise ApiError(
                    429,
                    f"the queue is full ({self.held} requests held, --max-queue {self.max_queue}); "
                    f"retry in about {wait} s",
                    type="rate_limit_error",
                    code="rate_limit_exceeded",
                    headers={"Retry-After": str(wait)},
                )
            self.waiting.append(job)
            self.metrics.queue_depth.set(len(self.waiting))
            self._moved = True
            self._cond.notify()

    def cancel(self, job: Job) -> bool:
        """The client left: a waiting job leaves the queue (True: it was never decoded); a decoding one
        stops after its round (False: the decode ends as `cancelled`, reported like any other)."""
        with self._cond:
            job.cancelled.set()
            if job in self.waiting:
                self.waiting.remove(job)
                self.metrics.queue_depth.set(len(self.waiting))
                self._moved = True
                return True
            return False

    def close(self) -> None:
        """Refuse new work, fail what waits, stop the decode in flight, and wait for the thread."""
        why = "the server shut down before this request's turn"
        with self._cond:
            self.closing = True
            for job in self.waiting:
                job.post(ApiError(503, why, type="server_error", code="shutting_down"))
            self.waiting.clear()
            if self.in_flight is not None:
                self.in_flight.cancelled.set()
            self._cond.notify_all()
        if self.thread.is_alive():
            self.thread.join()

    def _take(self) -> Job | None:
        with self._cond:
            self.in_flight = None
            self.metrics.running.set(0)
            idle = not self.waiting
        if idle:
            self._sample(None)  # serving has started, or its last request is done (or the server closed)
        while True:
            with self._cond:
                if not self.waiting and not self.closing:
                    self._cond.wait(IDLE_LOOK_S)
                if self.closing:
                    return None
                if self.waiting:
                    self.in_flight = self.waiting.popleft()
                    self.metrics.queue_depth.set(len(self.waiting))
                    self.metrics.running.set(1)
                    return self.in_flight
            if self.decoder.policy is not None:  # idle: a policy edit is picked up (a refused one reported) now
                self.decoder.policy.look()  # outside the lock: a reload reads the policy file

    def _sample(self, job: Job | None, taken: bool = True) -> None:
        """The queue as the log and the TUI see it; after a round (not `taken`) only if requests came or left."""
        with self._cond:
            moved, self._moved, waiting = self._moved, False, len(self.waiting)
        if not (moved or taken):
            return
        driver, req = self.decoder.driver, job.request if job else None
        driver.emit(  # from this thread: the session's one publisher
            QueueSample(
                session_id=driver.session_id,
                t=time.time(),
                waiting=waiting,
                request_id=req.id if req else "",
                endpoint=req.endpoint if req else "",
                arrived=job.queued_at if job else 0.0,
            )
        )

    def _run(self) -> None:
        try:
            while (job := self._take()) is not None:
                self._serve(job)
        except BaseException as exc:  # the log failed (or worse): no request can be served any more
            self.failure = exc
            self.on_fatal(exc)

    def _serve(self, job: Job) -> None:
        started = time.perf_counter()
        try:
            self._sample(job)  # here, so a log that fails now still answers the request
            done = self.decoder.decode(job.request, functools.partial(self._on_round, job), lambda: _stop(job))
        except LogWriteFailed as exc:
            self._failed(job, ApiError(503, f"the server cannot log any more: {exc}", type="server_error"))
            raise
        except ApiError as exc:  # refused at its turn: a reload since admission removed the class it names
            self._failed(job, exc)
        except SpecmonError as exc:
            self._failed(job, ApiError(400, str(exc), code="invalid_value"))
        except Exception as exc:  # noqa: BLE001 - one request's bug must not end the server
            traceback.print_exc(file=sys.stderr)
            self._failed(job, ApiError(500, f"decoding failed: {exc!r}", type="server_error"))
        else:
            finished = self._finished(job, done)
            self._mean_s = 0.8 * self._mean_s + 0.2 * (time.perf_counter() - started)
            job.post(finished)
            self.on_done(job, finished)

    def _failed(self, job: Job, error: ApiError) -> None:
        """The client gets an error, not text: its rounds (if any ran) count, none of their tokens as sent."""
        self.metrics.count_rounds(job.rounds, 0)
        job.post(error)

    def _on_round(self, job: Job, ev: RoundVerified) -> None:
        now, name = time.perf_counter(), ev.prompt_class
        job.rounds.append(ev)
        if job.last_round_at is None:
            job.ttft_s = time_to_first_token_s(job.queued_at, ev.t)  # the TUI's figure, from the same times
            self.metrics.ttft.labels(name).observe(job.ttft_s)
        elif ev.emitted:
            per_token = (now - job.last_round_at) / len(ev.emitted)
            for _ in ev.emitted:
                self.metrics.per_token.labels(name).observe(per_token)
        job.last_round_at = now
        self._sample(job, taken=False)
        piece = job.text.add(ev.emitted)
        if piece:
            job.post(Piece(piece, SpecmonRound(ev.round_id, ev.draft_len, len(ev.proposed), ev.accepted)))

    def _finished(self, job: Job, done: Decoded) -> Finished:
        req, run = job.request, done.run
        rest = job.text.finish()
        sent = job.text.billed if job.text.stopped else len(run.generated)  # a stop string's cut is not billed
        completion = sent - (run.stop_reason == "eos" and not job.text.stopped)  # the end token is never sent
        usage = Usage(done.started.prompt_tokens, completion, done.started.prompt_tokens + completion)
        info = SpecmonInfo(
            session_id=self.decoder.driver.session_id,
            prompt_id=req.id,
            prompt_class=done.started.prompt_class,
            class_rule=done.started.class_rule,
            draft_len=done.started.draft_len,
            round_ids=[ev.round_id for ev in job.rounds],
            draft_lens=[ev.draft_len for ev in job.rounds],
            stop_reason=run.stop_reason,
        )
        reason = FINISH_REASONS.get(run.stop_reason, run.stop_reason)
        self.metrics.requests.labels(req.endpoint, reason).inc()
        self.metrics.prompt_tokens.inc(usage.prompt_tokens)
        self.metrics.generation_tokens.inc(usage.completion_tokens)
        self.metrics.count_rounds(job.rounds, completion)
        return Finished(rest, job.text.text, reason, usage, info)


def _stop(job: Job) -> str | None:
    """Asked after every round: why the decode should end here, if it should."""
    if job.cancelled.is_set():
        return "cancelled"
    return "stop" if job.text.stopped else None
