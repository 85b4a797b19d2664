"""`specmon` as a user runs it: a process of its own, started from this checkout; and what a run's log
says it decoded. `specmon(...)` runs a command to its end, `started(...)` leaves one running (a server,
a run to signal), `decoded(log, ...)` is a whole `specmon run --headless` and its log's events."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from specmon.events.log import read_log
from specmon.events.schema import PromptFinished

REPO = Path(__file__).resolve().parent.parent
SPECMON = [sys.executable, "-m", "specmon.cli"]


def specmon(*args, cwd: Path | None = None, env: dict | None = None, timeout: float = 600):
    """`specmon ARGS` run to its end from the checkout (or `cwd`): its exit status, stdout and stderr, as text."""
    command = [*SPECMON, *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd or REPO, env=env, timeout=timeout)


def started(*args, env: dict | None = None) -> subprocess.Popen:
    """`specmon ARGS` started from the checkout and left running, its stdout and stderr piped, as text."""
    command = [*SPECMON, *map(str, args)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)


def decoded(log: Path, *args, timeout: float = 600) -> list:
    """`specmon run --headless ARGS --log LOG`, which must end well: every event of its log."""
    done = specmon("run", "--headless", *args, "--log", log, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return list(read_log(log))


def finished_prompts(events) -> list[PromptFinished]:
    """The PromptFinished events among `events` (a log's, say), in their order."""
    return [e for e in events if isinstance(e, PromptFinished)]
