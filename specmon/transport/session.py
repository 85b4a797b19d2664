"""One live session's plumbing: the log, the channel, the attach socket and the driver, opened together and
closed together (live_session), whichever scheduler (run, sweep, policy, bench, server) feeds it."""

from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from specmon import __version__
from specmon.console import notice, print_error, progress
from specmon.engine.driver import Cancelled, SessionDriver, host_facts, new_session_id
from specmon.engine.costs import Costs, measure_costs, timings_total
from specmon.engine.drafters import Drafter
from specmon.events.log import Rotation, default_log_path
from specmon.events.parts import refuse_taken_parts
from specmon.events.schema import AnyEvent, Sampling, SessionFinished, SessionStarted
from specmon.memory.store import Memory, Shelf, accept_key, costs_key
from specmon.transport.channel import Channel, LogSink, LogWriteFailed, Subscription
from specmon.transport.serve import EventServer, runtime_dir

VIEW_BUFFER = 100_000  # events a slow viewer may fall behind before it skips (and counts) the oldest


@dataclass
class LiveSession:
    driver: SessionDriver | None  # None: a session that decodes nothing (watch, proxy) and only publishes
    channel: Channel
    sink: LogSink
    server: EventServer | None
    session_id: str
    view: Subscription | None = None  # the TUI's bounded buffer, subscribed before the first event
    events: list[AnyEvent] = field(default_factory=list)  # everything published (if kept), for the final tables
    finished: SessionFinished | None = None
    costs: Costs | None = None  # the engine's costs, measured at load under a policy
    memory: Memory | None = None  # what earlier sessions learned (memory.store); None: nothing kept
    engine_key: dict[str, str] = field(default_factory=dict)  # what the engine's figures depend on

    def shelf(self, kind: str, key: dict[str, str]) -> Shelf | None:
        """This session's place in the store for `kind` (None where it keeps nothing)."""
        return Shelf(self.memory, kind, key) if self.memory is not None else None

    def policy_shelf(self, sampling: Sampling) -> Shelf | None:
        """Where a policy keeps what its classes learned on this engine, sampling so."""
        return self.shelf("accept", accept_key(self.engine_key, sampling))

    @property
    def log_path(self) -> Path:
        return self.sink.path

    def finish(self, reason: str) -> None:
        """SessionFinished, once: "done", "interrupted" or "error"."""
        if self.finished is not None or self.sink.error is not None:
            return
        self.sink.sync()  # count what the log holds: a signal may land between its write and our callbacks
        rounds = self.sink.rounds_written
        self.finished = SessionFinished(session_id=self.session_id, t=time.time(), rounds=rounds, reason=reason)
        self.channel.publish(self.finished)


@contextmanager
def live_session(
    pair,
    profile,
    log_path: Path | None = None,
    *,
    serve: bool = True,
    listen: tuple[str, int] | None = None,
    policy=None,
    announce: bool = True,
    viewer: bool = False,
    keep_events: bool = True,
    rotation: Rotation | None = None,
    memory: Memory | None = None,
    engine_key: dict[str, str] | None = None,
) -> Iterator[LiveSession]:
    """Open the log (and the attach socket when `serve`), publish SessionStarted, and yield the
    session; on leaving, finish and close everything, raising a log-write failure if there was one.
    With a `rotation`, the log goes on in new parts (events.log), and SIGUSR1 rotates it too. With a
    `memory` and the `engine_key` its figures are stored under, what earlier sessions learned on this
    engine is read (the engine's costs here, and a policy's classes) and what this one learns is kept."""
    session = _open(pair, profile, log_path, serve, listen, viewer, rotation, keep_events)
    session.memory, session.engine_key = (memory, engine_key) if engine_key else (None, {})

    def header() -> SessionStarted:
        started = session.driver.started_event(profile, pair.drafter)
        if policy is not None:
            started.policy_text, started.policy_hash = policy.text, policy.sha256
            session.costs = _costs(session, profile, pair.drafter, policy, started.host, announce)
            started.verify_ms, started.draft_ms = list(session.costs.verify_ms), session.costs.draft_ms
            started.verify_disturbed = session.costs.disturbed
            if session.costs.disturbed and announce:
                notice(
                    f"the host was busy while the engine's costs were timed ({session.costs.disturbed} of "
                    f"{len(session.costs.verify_ms)} points timed under contention): the policy may misjudge "
                    "what a draft costs"
                )
        return started

    with _running(session, header, announce):
        yield session


def _costs(session: LiveSession, profile, drafter: Drafter, policy, host: dict[str, str], announce: bool) -> Costs:
    """The engine's costs: the profile's, else this host's store's (unless --retime), else timed now and stored."""
    pinned = getattr(profile, "verify_costs", None)  # a profile may pin them: reproducible decisions
    if pinned:
        return Costs(tuple(pinned), max(profile.draft_cost, 0.0))  # pinned: plain steps, drafts' too
    positions = max(2, max(c.draft_len for c in policy.classes) + 1)
    shelf = session.shelf("costs", costs_key(session.engine_key, host))
    recalled = shelf.recall(Costs) if shelf is not None and not shelf.memory.retime else None
    if recalled is not None and len(recalled.body.verify_ms) >= positions and not recalled.body.disturbed:
        if announce:
            notice(
                f"the engine's costs as session {recalled.session_id} timed them on this host (--retime: time again)"
            )
        return recalled.body
    what = "timing the engine for the policy"  # a verify pass over 1..positions positions: one short line a tenth
    with progress(what, timings_total(positions)) if announce else nullcontext(lambda done: None) as done:
        costs = measure_costs(session.driver.target, drafter, positions, done=done)
    if shelf is not None and not costs.disturbed:  # a curve the host disturbed is timed again next time
        shelf.keep(session.session_id, costs)
    return costs


@contextmanager
def observer_session(
    started: Callable[[str], SessionStarted],
    log_path: Path | None = None,
    *,
    serve: bool = True,
    listen: tuple[str, int] | None = None,
    announce: bool = True,
    viewer: bool = False,
    rotation: Rotation | None = None,
) -> Iterator[LiveSession]:
    """A session that decodes nothing (`watch`, `proxy`): the same log, channel and attach socket as a
    decoding one, its header built by `started(session_id)`; events are published on session.channel."""
    session = _open(None, None, log_path, serve, listen, viewer, rotation, keep_events=False)  # runs for days
    with _running(session, lambda: started(session.session_id), announce):
        yield session


@contextmanager
def _running(session: LiveSession, header: Callable[[], SessionStarted], announce: bool) -> Iterator[None]:
    """Announce, publish the header and run the body; then finish and close as live_session says."""
    in_flight: BaseException | None = None
    try:
        if announce:
            _announce(session)
        session.channel.publish(header())
        # SIGUSR1 (nginx's signal to reopen its logs) rotates a rotating log; without rotation it keeps its default
        rotating = handling(signal.SIGUSR1, lambda signum, frame: session.sink.rotate_soon())
        with rotating if session.sink.writer.rotation is not None else nullcontext():
            yield
        session.finish("done")
    except BaseException as exc:
        in_flight = exc
        with suppress(LogWriteFailed):  # the log is already failing; closing reports it
            session.finish("interrupted" if isinstance(exc, (KeyboardInterrupt, Cancelled)) else "error")
        raise
    finally:
        try:
            session.channel.close()
        finally:
            if session.server is not None:
                session.server.close()
        failure = session.sink.failure()
        if failure is not None and (in_flight is None or isinstance(in_flight, LogWriteFailed)):
            raise failure
        if failure is not None:  # the error in flight says what went wrong first; this says what it cost
            print_error(str(failure))


def observed_header(session_id: str, backend: str, target: str, kind: str, policy=None) -> SessionStarted:
    """The header of a session that decodes nothing: `backend` "watch" or "proxy", the server's URL as its
    target and its kind (e.g. "llama-server") as its drafter; the host, so log info says how busy it was."""
    return SessionStarted(
        session_id=session_id,
        t=time.time(),
        specmon_version=__version__,
        profile_name=backend,
        profile_text="",
        backend=backend,
        target=target,
        drafter=kind,
        dtype="",
        device="",
        host=host_facts(),
        policy_text=policy.text if policy is not None else "",
        policy_hash=policy.sha256 if policy is not None else "",
    )


@contextmanager
def handling(signum: int, handler: Callable) -> Iterator[None]:
    """While inside, `handler` takes `signum`, in the main thread (only it may set one); the old one after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signum, handler)
    try:
        yield
    finally:
        signal.signal(signum, previous)


def _open(
    pair, profile, log_path: Path | None, serve: bool, listen, viewer: bool, rotation, keep_events
) -> LiveSession:
    session_id = new_session_id()
    path = log_path or default_log_path(session_id)
    if rotation is not None:
        refuse_taken_parts(path)  # before the log exists: nothing to remove
    sink = LogSink(path)
    sink.writer.rotation = rotation  # from its next batch: the header is the first
    channel = Channel(sink)
    session = LiveSession(None, channel, sink, None, session_id)
    if pair is not None:
        session.driver = SessionDriver(session_id, pair.target, pair.tokenizer, channel.publish, profile.tie_margin)
    if keep_events:  # False for a long-lived session (a server, a watch): only the log keeps them
        channel.on_event(session.events.append)
    session.view = channel.subscribe(maxlen=VIEW_BUFFER) if viewer else None
    try:
        session.server = EventServer(sink, runtime_dir() / f"{session_id}.sock", listen) if serve else None
    except BaseException:
        channel.close()
        sink.path.unlink(missing_ok=True)  # it holds no event yet: nothing to keep
        raise
    return session


def _announce(session: LiveSession) -> None:
    """Where to watch from; for TCP, the 0600 token file's path, never the token (a scrollback is readable)."""
    server = session.server
    watch = f"specmon attach {server.unix_path}" if server else ""
    notice(f"logging to {session.log_path}" + (f"; watch with: {watch}" if server else ""), [watch])
    if server and server.tcp_address:
        host, port = server.tcp_address
        attach, token = f"specmon attach {host}:{port}", f"--token-file {server.token_path}"
        notice(
            f"serving on {host}:{port}; attach with: {attach} {token} "
            "(from another machine: copy that file, or set SPECMON_TOKEN)",
            [f"{attach} {token}", attach, token],  # the whole command on a line where it fits, else its halves
        )
