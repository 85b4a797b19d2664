"""The command line's two consoles and its progress bar, shared by every `specmon` command module."""

from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap
import time
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.text import Text

err = Console(stderr=True)
# Piped output is not cut to 80 columns, unless COLUMNS asks for a width (Rich reads it itself).
out = Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit() else 200)


def print_line(line: str) -> None:
    """A headless server's line (one per request, a refusal, a reload) on stdout, flushed at once so a
    piped log shows each request as it ends."""
    print(f"specmon: {line}", flush=True)


NOTICE_WIDTH = 80  # a start line fits the narrowest terminal in common use, whatever this one's width
HANGING = "  "  # a wrapped line's continuation, indented under the text it continues
GLUE = "\0"  # a space textwrap must not break at; printed as a space


def notice(text: str, commands: Iterable[str] = ()) -> None:
    """A start line (`specmon: text`) on stderr, wrapped at words to 80 columns (fewer on a narrower
    terminal) with a hanging indent; each of `commands` (for the user to copy) on one line where it fits."""
    width = min(NOTICE_WIDTH, shutil.get_terminal_size().columns)
    for line in hanging_lines(f"specmon: {text}", width, HANGING, commands):
        print(line, file=sys.stderr, flush=True)


def print_error(message: str, whole: Iterable[str] = ()) -> None:
    """`specmon: message` on stderr: one message, each of its lines wrapped at words to error_width()
    with a hanging indent, a phrase of `whole` kept on one line where it fits."""
    width = error_width()
    for line in f"specmon: {message}".splitlines():
        for part in hanging_lines(line, width, HANGING, whole) if width else [line]:
            print(part, file=sys.stderr, flush=True)


def error_width() -> int | None:
    """The width an error wraps to: stream_width of stderr."""
    return stream_width(sys.stderr)


def stream_width(stream) -> int | None:
    """COLUMNS where it asks for a width, else the terminal's behind `stream`; None when it is piped or a
    file, where a line stays whole for a script or a log reader to find."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit():
        return int(columns)
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):  # not a terminal, or no file behind the stream
        return None


def hanging_lines(text: str, width: int, indent: str, whole: Iterable[str] = ()) -> list[str]:
    """`text` wrapped at words to `width`, each continuation line starting with `indent`; a phrase of
    `whole` is kept on one line where a continuation line can hold it (a word longer than a line stays whole)."""
    room = width - len(indent)
    for phrase in whole:
        if phrase and len(phrase) <= room:
            text = text.replace(phrase, phrase.replace(" ", GLUE))
    return [line.replace(GLUE, " ") for line in words_wrapped(text, width, "", indent, fold_long=False)]


def words_wrapped(text: str, width: int, first: str = "", then: str = "", fold_long: bool = True) -> list[str]:
    """The one wrap of words to a width: `text` broken at spaces only, never at a hyphen (a value such as
    `torch-nopad` or a command stays whole), its first line after `first` and the rest after `then`; a word
    longer than a line folded across lines, or kept whole where `fold_long` is False."""
    return textwrap.wrap(
        text, width, initial_indent=first, subsequent_indent=then, break_long_words=fold_long, break_on_hyphens=False
    )


class Hanging:
    """A line (plain or styled) that wraps at words to the width it is drawn at, its continuation lines
    `further` columns in from where it starts, each phrase of `whole` on one line where it fits (a rich
    renderable: Text wraps to column 0)."""

    def __init__(self, line: str | Text, further: int = len(HANGING), whole: Iterable[str] = ()) -> None:
        self.line = line if isinstance(line, Text) else Text(line)
        self.further, self.whole = further, tuple(whole)

    def __rich_console__(self, console, options):
        plain = self.line.plain
        indent = " " * (len(plain) - len(plain.lstrip()) + self.further)
        yield from hanging_text(self.line, options.max_width, indent, self.whole)


def hanging_text(text: Text, width: int, indent: str, whole: Iterable[str] = ()) -> list[Text]:
    """hanging_lines of a styled Text, each line keeping the styles of the words it holds."""
    flat = re.sub(r"\s", " ", text.plain)  # a tab or newline in a name: a space, as textwrap makes it
    text, lines, start = Text(flat, style=text.style, spans=list(text.spans)), [], 0
    for i, line in enumerate(hanging_lines(text.plain, width, indent, whole) or [""]):
        words = line[len(indent) :] if i else line  # a line is the text's next words, after its indent
        start = text.plain.index(words, start)
        piece = Text(indent if i else "") + text[start : start + len(words)]
        lines += _folded(piece, width, indent)
        start += len(words)
    return lines


def _folded(line: Text, width: int, indent: str) -> list[Text]:
    """A line longer than `width` (a word no line holds, as a long path) folded under `indent`, never cut."""
    room = max(width - len(indent), 1)
    pieces, rest = [line[:width]], line[width:]
    while rest.plain:
        pieces.append(Text(indent) + rest[:room])
        rest = rest[room:]
    for piece in pieces:
        piece.no_wrap = True
    return pieces


PROGRESS_LINE_S = 30.0  # piped progress: a line at least this often, besides one per tenth done


@contextmanager
def progress(description: str, total: int) -> Iterator[Callable[[int], None]]:
    """A bar on stderr; yields `done(n)`, which sets how many of `total` are finished. Piped
    (`2>&1 | tee`), where a bar would print nothing until the end, a line per tenth done instead."""
    if not err.is_terminal:
        yield progress_lines(description, total)
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err) as bar:
        task = bar.add_task(description, total=total)
        yield lambda done: bar.update(task, completed=done)


def progress_lines(description: str, total: int, clock: Callable[[], float] = time.monotonic) -> Callable[[int], None]:
    """`done(n)` that prints `description: n of total done (s, about how long is left)` on stderr
    at each tenth of the total, or when PROGRESS_LINE_S passed since the last line; Rich flushes
    each line. The time left is the pace so far carried over the rest."""
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
