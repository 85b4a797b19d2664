"""Glue for `specmon run`: load the pair, open the log, run the prompts with a progress bar."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from specmon.engine.prompts import Prompt
from specmon.engine.session import RunSettings, new_session_id, run_prompts, session_started
from specmon.events.log import LogWriter, default_log_path
from specmon.events.schema import AnyEvent, Sampling
from specmon.profiles import DrafterSpec, Profile


@dataclass
class RunResult:
    events: list[AnyEvent]
    log_path: Path
    title: str


def run_session(profile: Profile, drafter_spec: DrafterSpec, sampling: Sampling, prompts: list[Prompt],
                max_new_tokens: int, log_path: Path | None, console: Console) -> RunResult:
    from specmon.backends.loader import load_pair  # the only place torch enters

    with console.status(f"loading {profile.target.describe()} ({profile.dtype}, {profile.device})"):
        pair = load_pair(profile, drafter_spec)
    session_id = new_session_id()
    path = log_path or default_log_path(session_id)
    events: list[AnyEvent] = []
    settings = RunSettings(drafter_spec.draft_len, sampling, max_new_tokens, profile.tie_margin)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with LogWriter(path) as log, Progress(*columns, console=console) as bar:
        def emit(event: AnyEvent) -> None:
            log.write(event)
            events.append(event)

        emit(session_started(session_id, profile, pair.drafter, pair.target))
        task = bar.add_task(f"{pair.drafter.name} k={drafter_spec.draft_len} vs plain", total=len(prompts))
        run_prompts(session_id, pair.target, pair.drafter, pair.tokenizer, prompts, settings, emit,
                    on_prompt=lambda done: bar.update(task, completed=done))
    title = (f"{profile.name}: {pair.drafter.name} k={drafter_spec.draft_len}, "
             f"{'greedy' if sampling.greedy else f'T={sampling.temperature} top_p={sampling.top_p}'}")
    return RunResult(events, path, title)
