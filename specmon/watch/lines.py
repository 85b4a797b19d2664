"""What a watch says, one line each: a window's figures, a change in the server's state, the totals.
The figures come from specmon.metrics.served; here they are only written, and wrapped to a terminal."""

from __future__ import annotations

import re

from specmon.text import wrapped_lines
from specmon.events.schema import ServerScraped
from specmon.metrics import served
from specmon.metrics.format import clock, count
from specmon.metrics.served_summary import figures


def window_line(w: served.Window, after: ServerScraped) -> str:
    """`12:03:04-12:03:05  drafts 14 ...  running 1 waiting 0`: the window, then the gauges as read at its end."""
    running = "" if after.running is None else f"  running {after.running}"
    waiting = "" if after.waiting is None else f" waiting {after.waiting}"
    return f"{clock(w.start)}-{clock(w.start + w.seconds)}  {figures(w)}{running}{waiting}"


def idle_line(w: served.Window) -> str:
    return f"{clock(w.start + w.seconds)}  idle: no drafts and no tokens (said once, until something happens)"


def state_line(
    before: ServerScraped | None, last_good: ServerScraped | None, now: ServerScraped, gone: bool
) -> str | None:
    """One line when the server's state changed: down (or answering something else), back, restarted."""
    at = clock(now.t)
    if now.error:
        if before is not None and before.error == now.error:
            return None  # still the same failure: said once
        return f"{at}  {now.error}" if now.error.startswith(now.url) else f"{at}  {now.url}: {now.error}"
    came_back = before is not None and bool(before.error)
    reset = last_good is not None and served.restarted(last_good, now, gone)
    if came_back and reset:
        return f"{at}  {now.url} is back, restarted: its counters started again (no window spans the restart)"
    if came_back:
        return f"{at}  {now.url} is back ({now.kind})"
    if reset:
        return f"{at}  {now.url} restarted: its counters went back (no window spans the restart)"
    if before is None or last_good is None:
        return f"{at}  watching {now.url} ({now.kind})"
    return None


def totals_line(runs: list[list[ServerScraped]], failed_reads: int) -> str:
    """Everything the watch saw, summed run by run (served.total_of_runs), with its restarts and failed reads."""
    restarts = max(len(runs) - 1, 0)
    span = f"{count(restarts, 'restart')}, {count(failed_reads, 'failed read')}"
    w = served.total_of_runs(runs)
    if w is None:
        return f"total: no two good reads of the server, nothing to sum ({span})"
    return f"total {clock(w.start)}, {w.seconds:.0f} s watched ({span}): {figures(w)}"


def fitted(line: str, width: int | None) -> list[str]:
    """`line` wrapped at its fields (split by two blanks; a run of positions, "4-47: 0.00", kept whole)
    to `width` under a hanging indent; whole where `width` is None or under 20."""
    if width is None or width < 20:  # narrower (COLUMNS=0, a sliver of a pane), a word or less a line: whole
        return [line]
    fields = [*line.split("  "), *re.findall(r"\d+-\d+: \S+", line)]
    return wrapped_lines(line, width, whole=fields)
