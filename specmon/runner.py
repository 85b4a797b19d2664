"""Glue for `specmon run`: load the pair, open the channel (log, socket), run the prompts."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from specmon.engine.prompts import Prompt
from specmon.engine.session import RunSettings, new_session_id, run_prompts, session_started
from specmon.events.channel import Channel, LogSink
from specmon.events.log import default_log_path
from specmon.events.schema import AnyEvent, RoundVerified, Sampling, SessionFinished
from specmon.events.serve import EventServer, runtime_dir
from specmon.policy.engine import PolicyEngine
from specmon.policy.session import run_policy_prompts
from specmon.profiles import DrafterSpec, Profile


@dataclass
class RunResult:
    events: list[AnyEvent]
    log_path: Path
    title: str


class Stopped(Exception):
    """Raised inside the decode thread when the viewer quits mid-run."""


def run_session(profile: Profile, drafter_spec: DrafterSpec, sampling: Sampling, prompts: list[Prompt],
                max_new_tokens: int, log_path: Path | None, console: Console,
                listen: tuple[str, int] | None = None, tui: bool = False, policy=None) -> RunResult:
    from specmon.backends.loader import load_pair  # the only place torch enters

    with console.status(f"loading {profile.target.describe()} ({profile.dtype}, {profile.device})"):
        pair = load_pair(profile, drafter_spec)
    session_id = new_session_id()
    sink = LogSink(log_path or default_log_path(session_id))
    channel = Channel(sink)
    events: list[AnyEvent] = []
    channel.on_event(events.append)
    server = EventServer(sink, runtime_dir() / f"{session_id}.sock", listen)
    _announce(server, sink.path)
    settings = RunSettings(drafter_spec.draft_len, sampling, max_new_tokens, profile.tie_margin)
    title = (f"{profile.name}: {pair.drafter.name} k={drafter_spec.draft_len}, "
             f"{'greedy' if sampling.greedy else f'T={sampling.temperature} top_p={sampling.top_p}'}")
    started = session_started(session_id, profile, pair.drafter, pair.target)
    if policy is not None:
        started.policy_text, started.policy_hash = policy.text, policy.sha256
    channel.publish(started)

    def decode(emit, on_prompt) -> str:
        """Run every prompt; returns how the session ended. Always closes the log and socket."""
        reason = "error"
        try:
            if policy is None:
                run_prompts(session_id, pair.target, pair.drafter, pair.tokenizer, prompts, settings, emit, on_prompt)
            else:
                engine = PolicyEngine(policy, session_id)
                run_policy_prompts(session_id, pair.target, pair.drafter, pair.tokenizer, prompts, settings,
                                   engine, emit, on_prompt)
            reason = "done"
        except (KeyboardInterrupt, Stopped):
            reason = "interrupted"
        finally:
            rounds = sum(isinstance(e, RoundVerified) for e in events)
            channel.publish(SessionFinished(session_id=session_id, t=time.time(), rounds=rounds, reason=reason))
            channel.close()
            server.close()
        return reason

    if tui:
        _decode_under_tui(channel, decode, title)
    else:
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        with Progress(*columns, console=console) as bar:
            what = f"policy {policy.source}" if policy else f"{pair.drafter.name} k={drafter_spec.draft_len} vs plain"
            task = bar.add_task(what, total=len(prompts))
            if decode(channel.publish, lambda done: bar.update(task, completed=done)) == "interrupted":
                raise KeyboardInterrupt
    return RunResult(events, sink.path, title)


def _decode_under_tui(channel: Channel, decode, title: str) -> None:
    """Decode on a thread; the app (main thread) drains a bounded view of the channel."""
    import threading

    from specmon.tui.app import make_app
    from specmon.tui.feed import Feed

    stop = threading.Event()
    feed = Feed(channel.subscribe(maxlen=100_000), title)

    def emit(event) -> None:
        if stop.is_set():
            raise Stopped
        channel.publish(event)

    worker = threading.Thread(target=lambda: (decode(emit, None), feed.done.set()), name="specmon-decode")
    worker.start()
    try:
        make_app(feed).run()
    finally:
        stop.set()
        worker.join()


def _announce(server: EventServer, log_path: Path) -> None:
    """Tell the user where to watch from: another terminal or an SSH login."""
    print(f"specmon: logging to {log_path}; watch with: specmon attach {server.unix_path}", file=sys.stderr)
    if server.tcp_address:
        host, port = server.tcp_address
        print(f"specmon: serving on {host}:{port}; attach with: specmon attach {host}:{port} --token {server.token}",
              file=sys.stderr)
