"""The command line's two consoles and its progress bar, shared by every `specmon` command module."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from specmon.text import line_width, wrapped_lines

err = Console(stderr=True)
PIPED_WIDTH = 200  # piped output is not cut to 80 columns, unless COLUMNS asks for a width
out = Console(width=None if line_width(sys.stdout) else PIPED_WIDTH)  # a terminal's: Rich follows its resizes


def print_line(line: str) -> None:
    """A headless server's line on stdout, flushed at once so a piped log shows each request as it ends."""
    print(f"specmon: {line}", flush=True)


def say(line: str, soft_wrap: bool = False) -> None:
    """A line on stdout as written, never read as markup (soft_wrap: nor wrapped, for a path to copy whole)."""
    out.print(line, highlight=False, markup=False, soft_wrap=soft_wrap)


NOTICE_WIDTH = 80  # a start line fits the narrowest terminal in common use, whatever this one's width


def notice(text: str, commands: Iterable[str] = ()) -> None:
    """`specmon: text` on stderr, wrapped to 80 columns at most, each of `commands` on one line where it fits."""
    print_error(text, commands, NOTICE_WIDTH)


def print_error(message: str, whole: Iterable[str] = (), most: int | None = None) -> None:
    """`specmon: message` on stderr (looked up now: Textual swaps it), wrapped to the terminal or `most`, each of `whole` whole."""
    width = line_width(sys.stderr, piped=most, most=most)
    for line in f"specmon: {message}".splitlines():
        for part in wrapped_lines(line, width, whole=whole) if width else [line]:
            print(part, file=sys.stderr, flush=True)


PROGRESS_LINE_S = 30.0  # piped progress: a line at least this often, besides one per tenth done


@contextmanager
def progress(description: str, total: int) -> Iterator[Callable[[int], None]]:
    """A bar on stderr (piped, where a bar prints nothing till the end: progress_lines); yields `done(n)`."""
    if not err.is_terminal:
        yield progress_lines(description, total)
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err) as bar:
        task = bar.add_task(description, total=total)
        yield lambda done: bar.update(task, completed=done)


def progress_lines(description: str, total: int, clock: Callable[[], float] = time.monotonic) -> Callable[[int], None]:
    """`done(n)`, which says `n of total done` and the time left at the pace so far, each tenth or PROGRESS_LINE_S."""
    started = last = clock()
    shown_tenth = 0

    def done(n: int) -> None:
        nonlocal last, shown_tenth
        now, tenth = clock(), n * 10 // max(total, 1)
        if tenth > shown_tenth or now - last >= PROGRESS_LINE_S:
            shown_tenth, last = tenth, now
            took = now - started
            left = f", about {_duration(took / n * (total - n))} left" if 0 < n < total else ""
            err.print(f"{description}: {n} of {total} done ({took:.0f} s{left})", highlight=False, markup=False)

    err.print(f"{description}: 0 of {total} done", highlight=False, markup=False)
    return done


def _duration(seconds: float) -> str:
    """98 s, 7 min, 1.5 h: as precise as an estimate from the pace so far deserves."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"


def wants_tui(args) -> bool:
    """The TUI, unless --headless or either end of the terminal is not one (piped, a script)."""
    return not args.headless and sys.stdout.isatty() and sys.stdin.isatty()
