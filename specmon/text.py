"""The one text model: a line is a styled Text, or a title of named Parts, fitted to one width got from one
place (line_width) by wrap, title or first_fitting. Every screen, pane, table note, `--help`, notice and
record fits its text here; a piped stream gets no width, so a record stays one line for a script."""

from __future__ import annotations

import os
import re
from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate
from typing import Iterable

from rich.cells import cell_len, set_cell_size
from rich.text import Text

HANGING = "  "  # a wrapped line's continuation, indented under the text it continues
ELLIPSIS = "…"  # marks every cut: a shortened name must not pass for another
BLANK = re.compile(r"[ \t\n\r\f\v]")  # where a line may break: ASCII blanks (a no-break space holds, as in textwrap)
WORD = re.compile(r"[^ \t\n\r\f\v]+")


def line_width(stream, piped: int | None = None, most: int | None = None) -> int | None:
    """The width for `stream`: COLUMNS, else its terminal's, else `piped` (None: a line stays whole); at most `most`."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit():
        width: int | None = int(columns)
    else:
        try:
            width = os.get_terminal_size(stream.fileno()).columns
        except (AttributeError, ValueError, OSError):  # not a terminal, or no file behind the stream
            width = piped
    return width if width is None or most is None else min(width, most)


def wrap(
    text: str | Text,
    width: int,
    indent: str = HANGING,
    whole: Iterable[str] = (),
    start: int = 0,
    fold: bool = True,
) -> list[Text]:
    """`text` broken at blanks (never at a hyphen: `torch-nopad` stays whole) into lines of `width`, the
    first starting at column `start`, the rest after `indent`; each line keeps the styles of its words.
    A phrase of `whole` that a line can hold is never parted. A word longer than a line starts a line (a
    path stays together as far as it can) and is folded under the indent (`fold`) or left whole past the
    width for a terminal to fold."""
    text = Text(text) if isinstance(text, str) else text
    flat = Text(BLANK.sub(" ", text.plain), style=text.style, spans=list(text.spans))
    at = list(accumulate((cell_len(ch) for ch in flat.plain), initial=0))  # columns before each character
    lines: list[Text] = []
    then = max(width - cell_len(indent), 1)  # a continuation line's room
    # the current line's span in `flat` (its own leading blanks in), and its room
    first, last, room = 0, None, width - start
    for s, e in _words(flat.plain, whole, then):
        if at[e] - at[first] <= room:
            last = e
            continue
        if last is None and at[e] - at[s] <= room:  # the first word fits without the line's leading blanks
            first, last = s, e
            continue
        if last is not None or start:  # the line ends before this word; a first line with none holds the prefix alone
            lines.append(Text() if last is None else _line(flat, first, last, lines, indent))
            first, room = s, then
        if fold and at[e] - at[first] > room > 0:  # a word no line holds: folded, its last piece a line of its own
            while at[e] - at[first] > room:
                end = max(bisect_right(at, at[first] + room) - 1, first + 1)  # the most characters the room holds
                lines.append(_line(flat, first, end, lines, indent))
                first, room = end, then
            room = at[e] - at[first]
        last = e
    if last is not None:
        lines.append(_line(flat, first, last, lines, indent))
    return lines or [Text()]  # a blank text is one blank line


def wrap_each(text: str | Text, width: int, whole: Iterable[str] = ()) -> list[Text]:
    """Each line of `text` wrapped as wrap does it, within `width` (one column at least): a pane's lines, to count."""
    text = Text(text) if isinstance(text, str) else text
    return [part for line in text.split("\n") for part in wrap(line, max(width, 1), whole=whole)]


def wrapped_lines(
    text: str, width: int, indent: str = HANGING, whole: Iterable[str] = (), fold: bool = False
) -> list[str]:
    """wrap's lines as plain strings (a long word left whole, for a terminal or a log reader to fold)."""
    return [line.plain for line in wrap(text, width, indent, whole, fold=fold)]


def _words(plain: str, whole: Iterable[str], room: int) -> list[tuple[int, int]]:
    """The (start, end) of each run of non-blanks, those inside a phrase of `whole` that fits `room` joined."""
    words = [[m.start(), m.end()] for m in WORD.finditer(plain)]
    for phrase in {p for p in whole if p and cell_len(p) <= room}:
        for m in re.finditer(re.escape(phrase), plain):
            inside = [w for w in words if w[0] < m.end() and w[1] > m.start()]
            if len(inside) > 1:
                inside[0][1] = inside[-1][1]
                words = [w for w in words if w not in inside[1:]]
    return [(s, e) for s, e in words]


def _line(flat: Text, s: int, e: int, done: list[Text], indent: str) -> Text:
    line = (Text(indent) if done else Text()) + flat[s:e]
    line.no_wrap = True
    return line


class Hanging:
    """A rich renderable: a line wrapped at words to the width it is drawn at, its continuation lines
    `further` columns in from where it starts (Text wraps to column 0), each of `whole` on one line."""

    def __init__(self, line: str | Text, further: int = len(HANGING), whole: Iterable[str] = ()) -> None:
        self.line = line if isinstance(line, Text) else Text(line)
        self.further, self.whole = further, tuple(whole)

    def __rich_console__(self, console, options):
        plain = self.line.plain
        indent = " " * (len(plain) - len(plain.lstrip()) + self.further)
        yield from wrap(self.line, options.max_width, indent, self.whole)


@dataclass
class Part:
    """A part of a title: its wordings, longest first ("" leaves it out), and its style."""

    key: str
    wordings: list[str]
    style: str = ""


def title(parts: list[Part], steps: tuple[str, ...], width: int | None, cut_part: str = "", sep: str = " · ") -> Text:
    """The parts joined by `sep` within `width` (None: no limit). Too wide, each key of `steps` in turn
    moves its part to its next wording (a part with none left spends the step); still too wide, the part
    `cut_part` is cut to what is left; last, the line itself, each cut marked with …."""
    step = {p.key: 0 for p in parts}
    chosen = lambda: {p.key: p.wordings[step[p.key]] for p in parts}  # noqa: E731
    over = lambda: width is not None and _joined(chosen(), sep) > width  # noqa: E731
    for key in steps:
        if not over():
            break
        if step.get(key, -1) + 1 < len(next((p.wordings for p in parts if p.key == key), ())):
            step[key] += 1
    words = chosen()
    if cut_part in words and width is not None:
        excess = max(_joined(words, sep) - width, 0)
        words[cut_part] = cut(words[cut_part], max(cell_len(words[cut_part]) - excess, 2))
    line = Text(no_wrap=True)
    for p in parts:
        if words[p.key]:
            line.append(sep if line else "").append(words[p.key], style=p.style)
    if width is not None:
        line.truncate(max(width, 1), overflow="ellipsis")
    return line


def _joined(words: dict[str, str], sep: str) -> int:
    return cell_len(sep.join(word for word in words.values() if word))


def fill(text: str, width: int) -> str:
    """`text` in exactly `width` columns: cut with … where longer, padded with blanks where shorter (a table cell)."""
    return set_cell_size(cut(text, width), width)


def cut(text: str, width: int) -> str:
    """`text` within `width` columns, ending in … where it was cut."""
    return text if cell_len(text) <= width else set_cell_size(text, max(width - 1, 0)).rstrip() + ELLIPSIS


def first_fitting(width: int, *wordings: str) -> str:
    """The first of `wordings` (longest first) that fits `width`; the last, cut with …, where none does."""
    return next((w for w in wordings if cell_len(w) <= width), cut(wordings[-1], width))
