"""How a figure is written wherever it is shown: one spelling for a missing value."""

from __future__ import annotations

import time

MISSING = "N/A"


def fmt(value: float | None, spec: str = "{:.2f}") -> str:
    """`spec.format(value)`, or N/A when the figure cannot be computed (no rounds, no GPU)."""
    return MISSING if value is None else spec.format(value)


def ratio_interval(ratio: float | None, low: float | None, high: float | None, digits: int = 2) -> str:
    """`1.18x [1.01, 1.38]`: a spec/plain ratio and its 95% interval (none yet: the ratio alone)."""
    shown = "n/a" if ratio is None else f"{ratio:.{digits}f}x"
    return shown if low is None or high is None else f"{shown} [{low:.2f}, {high:.2f}]"


def markdown_cell(text: str) -> str:
    """A name inside a Markdown table: `|` would end the cell."""
    return text.replace("|", r"\|")


def count(n: int, noun: str) -> str:
    """`1 round`, `2 rounds`: a count with its noun in the number it takes."""
    return f"{n} {noun if n == 1 else noun + 's'}"


def clock(t: float | None) -> str:
    """Wall-clock time of day, as titles, tables and the watch's lines show it."""
    return "?" if t is None else time.strftime("%H:%M:%S", time.localtime(t))
