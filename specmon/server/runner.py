"""One serving session's life: the decoder and its worker thread inside a live session, the app,
and uvicorn on a socket bound here (so port 0 works and the address is known before the first
request). Shutting down refuses new requests, stops the decode in flight after its round, and
lets uvicorn finish the responses."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import uvicorn

from specmon.errors import SpecmonError
from specmon.policy.engine import PolicyEngine
from specmon.sched.policy import GatedDrafter, PolicyScheduler
from specmon.server.admit import Admission
from specmon.server.app import build_app
from specmon.server.classes import fixed_class, policy_class
from specmon.server.errors import ApiError, for_terminal
from specmon.server.guard import BODY_TIMEOUT_S, HEAD_TIMEOUT_S, MAX_CONNECTIONS, GuardedH11
from specmon.server.jobs import Decoder, Finished, Job, Worker
from specmon.server.metrics import ServerMetrics
from specmon.server.records import millis, notice_text, short_id
from specmon.transport.session import LiveSession, handling

MAX_BODY_BYTES = 1 << 20  # a chat far past any context this serves still fits; a runaway upload does not
GRACE_S = 5.0  # how long replies in flight may take to finish after a shutdown


@dataclass
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: bytes | None = None
    max_queue: int = 16
    max_body_bytes: int = MAX_BODY_BYTES
    draft_len: int | None = None  # a fixed k instead of the policy
    line: Callable[[str], None] | None = None  # one line per request (--headless)
    socket: socket.socket | None = None  # already bound (`specmon serve` binds before loading the model)
    head_timeout_s: float = HEAD_TIMEOUT_S  # a request line and headers not in by then: the connection is closed
    body_timeout_s: float = BODY_TIMEOUT_S  # a body not in by then: 408
    max_connections: int = MAX_CONNECTIONS  # one more is closed as soon as it opens


def uvicorn_config(app, head_timeout_s: float, max_connections: int) -> uvicorn.Config:
    """uvicorn's settings for `serve` and `proxy` alike; no log of its own: the session's events are the log."""
    return uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=GRACE_S,
        http=functools.partial(GuardedH11, head_timeout_s=head_timeout_s, max_connections=max_connections),
    )


class _Uvicorn(uvicorn.Server):
    """uvicorn's server, closing the decode worker first when it shuts down (so open streams end)."""

    def __init__(self, config: uvicorn.Config, before_shutdown: Callable[[], None]):
        super().__init__(config)
        self.before_shutdown = before_shutdown

    async def shutdown(self, sockets=None) -> None:
        await asyncio.to_thread(self.before_shutdown)
        await super().shutdown(sockets)


@contextmanager
def interrupt_when_up(server: uvicorn.Server) -> Iterator[None]:
    """Until uvicorn's own handler is in, a Ctrl-C asks `server` to exit as soon as it is up instead of
    raising wherever it lands (in a weakref callback Python prints it and drops it: the Ctrl-C right
    after the start line was lost); raised as KeyboardInterrupt once the body ends, as a Ctrl-C is."""
    caught: list[int] = []

    def hold(signum, frame) -> None:
        caught.append(signum)
        server.should_exit = True

    with handling(signal.SIGINT, hold):
        yield  # uvicorn puts its handler in while serving, and hands a Ctrl-C it took back here at its end
    if caught:
        raise KeyboardInterrupt


class OnThread:
    """A uvicorn server on a socket bound already, run from a thread of its own (tests, the TUI): its URL,
    start and stop. The class sets self.server, self.address and run(), and names its thread."""

    thread_name = "specmon-http"
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{'[' + host + ']' if ':' in host else host}:{port}"

    def start(self) -> None:
        """Serve from a thread: returns once requests are taken."""
        self._thread = threading.Thread(target=self.run, name=self.thread_name, daemon=True)
        self._thread.start()
        while not self.server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"{self.thread_name} ended before it started")
            time.sleep(0.01)  # uvicorn says it has started only by this flag

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join()


class Serving(OnThread):
    thread_name = "specmon-serve-http"

    def __init__(self, session: LiveSession, pair, profile, options: ServeOptions, policy=None):
        driver = session.driver
        self.session, self.options = session, options
        self.metrics = ServerMetrics()
        shelf = session.policy_shelf(profile.sampling.to_event())  # requests sample as they ask: the default
        session.channel.on_event(self.metrics.observe)
        engine = PolicyEngine(policy, session.session_id, session.costs, shelf) if policy else None
        self.policy = PolicyScheduler(driver, engine, pair.drafter) if policy else None
        k = options.draft_len if options.draft_len is not None else profile.drafter.draft_len
        self.decoder = Decoder(driver, pair.drafter, self.policy, k)
        self.worker = Worker(self.decoder, self.metrics, options.max_queue, self._done, self._fatal)
        self.admission = Admission(
            model_id=Path(pair.target.name).name,
            tokenizer=pair.tokenizer,
            max_len=pair.target.max_len,
            max_draft_len=GatedDrafter.max_draft_len if self.policy else k,
            defaults=profile.sampling.to_event(),
            classify=functools.partial(policy_class, self.policy) if self.policy else functools.partial(fixed_class, k),
        )
        self.socket = options.socket if options.socket is not None else bind(options.host, options.port)
        self.address = self.socket.getsockname()[:2]
        config = uvicorn_config(build_app(self), options.head_timeout_s, options.max_connections)
        self.server = _Uvicorn(config, self.worker.close)

    def run(self) -> None:
        """Serve until a signal (or stop()); raise what ended the worker, if anything did."""
        self.worker.thread.start()
        try:
            self.server.run(sockets=[self.socket])
        finally:
            self.worker.close()
            self.socket.close()
            if self.policy is not None:
                self.policy.engine.remember(final=True)  # what it learned since the last write, for the next session
        if self.worker.failure is not None:
            raise self.worker.failure

    def _fatal(self, exc: BaseException) -> None:
        """Stop serving; run() raises `exc` once the server is down, and the CLI prints it, once."""
        self.server.should_exit = True

    def _done(self, job: Job, done: Finished) -> None:
        if self.policy is not None:
            name = done.info.prompt_class
            shown = self.policy.engine.class_in_force(name)
            self.metrics.set_policy(name, shown.speculate, shown.draft_len)
        if self.options.line is not None:
            status = 200 if done.finish_reason != "cancelled" else 503 if self.worker.closing else 499
            self.options.line(for_terminal(request_line(job, done, status)))

    def on_refused(self, path: str, error: ApiError) -> None:
        """A refused request's headless line: wrapped to a terminal, made safe (it may hold what a client sent)."""
        if self.options.line is not None:
            self.options.line(notice_text(f"{error.status} {path}: {error.message}"))


def request_line(job: Job, done: Finished, status: int) -> str:
    """`200 2ec5b984 chat k=8 rounds=7 tokens=48+8 ttft=184ms tok/s=13.9`: one line per request (status
    499: the client left; 503: the server shut down; tok/s since it arrived), then its finish unless `stop`."""
    info, usage = done.info, done.usage
    ks = sorted(set(info.draft_lens))
    k = ",".join(map(str, ks)) if ks else str(info.draft_len)
    fields = [str(status), short_id(info.prompt_id), info.prompt_class, f"k={k}", f"rounds={len(info.round_ids)}"]
    fields += [f"tokens={usage.prompt_tokens}+{usage.completion_tokens}"]
    fields += [f"ttft={millis(None if job.ttft_s is None else job.ttft_s * 1e3)}"]
    fields += [f"tok/s={usage.completion_tokens / (time.perf_counter() - job.arrived):.1f}"]
    return " ".join(fields + ([f"finish={done.finish_reason}"] if done.finish_reason != "stop" else []))


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, or one line saying why not (e.g. the port is taken)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host, port), family=family, reuse_port=False)
    except OSError as exc:  # create_server wraps strerror in "(while attempting to bind on ...)": say it once
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise SpecmonError(f"cannot listen on {host}:{port} ({reason})") from None
    sock.setblocking(False)
    return sock
