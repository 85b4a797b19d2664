"""The command line's two consoles and its progress bar, shared by every `specmon` command module."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Callable, Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

err = Console(stderr=True)
out = Console(width=None if sys.stdout.isatty() else 200)  # piped output is not cut to 80 columns


@contextmanager
def progress(description: str, total: int) -> Iterator[Callable[[int], None]]:
    """A bar on stderr; yields `done(n)`, which sets how many of `total` are finished."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err, transient=not err.is_terminal) as bar:  # no stale bar in piped stderr
        task = bar.add_task(description, total=total)
        yield lambda done: bar.update(task, completed=done)
