"""Plain-terminal tables (rich, not Textual): the per-class summary that `run`, `attach --headless` and
`log info` print from `metrics.stats.summary`, the very fields `--json` and report.json hold, in 80 columns.
Class names, prompt ids and paths come from users' files: they are escaped, never read as Rich markup."""

from __future__ import annotations

from typing import Iterator

from rich import box
from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from specmon.console import err
from specmon.text import Hanging
from specmon.metrics.contention import HostTally, tally
from specmon.metrics.format import fmt as _num

CLASS_WIDTH = 16
VERDICT_COLOURS = {
    "faster": "green",
    "slower": "red",
    "not yet known": "yellow",
    "noise": "magenta",
    "busy host": "cyan",
}
VERDICT_MARKS = {"not yet known": "?", "noise": "!", "busy host": "~"}  # beside a speedup, for those its colour misses
COUNTS = ("prompts", "rounds", "empty_rounds", "proposed", "accepted")  # the acceptance table's counts, in order


class Note(Hanging):
    """A line under a table in `style`, wrapped as Hanging wraps it (a figure with its unit kept whole)."""

    def __init__(self, line: str, style: str = "", whole: tuple[str, ...] = ()) -> None:
        super().__init__(Text(line, style=style), whole=whole)


def _verdict(row: dict) -> str:
    if row["greedy_identical"] is True:
        return "[green]identical[/]"
    verdicts = row["equivalence"]
    if not verdicts or row["draft_len"] == 0:
        return "-"
    if "sampled" in verdicts:
        return "sampled"
    parts = [f"{n} {v}" for v, n in sorted(verdicts.items())]
    colour = "red" if "diverged" in verdicts else "yellow"
    return f"[{colour}]{', '.join(parts)}[/]"


def figures_table(title: str, columns: list[str], caption: str | None = None) -> Table:
    """A tool's table of results: the title as text (never markup), its first column text, the rest figures."""
    table = Table(title=escape(title), title_justify="left", caption=caption)
    for i, name in enumerate(columns):
        table.add_column(name, justify="right" if i else "left")
    return table


def compact_table(
    title: str,
    columns: tuple[str, ...],
    left: tuple[str, ...] = ("class", "output"),
    class_width: int | None = None,
    tight: bool = False,
) -> Table:
    """A rule under the header and no frame, so a row fits 80 columns; the `left` columns are text, the rest
    figures. `tight`: one blank between columns, and only a class name folds, never a figure or a header."""
    table = Table(
        title=title,
        title_justify="left",
        header_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
        padding=(0, 0 if tight else 1, 0, 0),
    )
    for i, name in enumerate(columns):  # the first column is a class's name (or a phase's)
        table.add_column(
            name,
            justify="left" if name in left else "right",
            min_width=class_width if i == 0 else None,
            no_wrap=tight and i > 0,
            overflow="fold" if i == 0 else "ellipsis",
        )
    return table


def class_table(summary: dict, title: str, log=None) -> Group:
    """The per-class summary in 80 columns, a row per (class, k) that ran rounds: acceptance, speed, then a_i."""
    width = min(CLASS_WIDTH, max(map(len, summary["classes"]), default=5))  # whole names, up to a point
    acceptance = compact_table(
        "", ("class", "k", "prompts", "rounds", "empty", "proposed", "accepted", "rate", "mean"), class_width=width
    )
    speed = compact_table(
        "", ("class", "k", "draft", "verify", "tok/s", "plain", "speedup", "95% CI", "output"), class_width=width
    )
    positions = []
    for name, row in ((name, row) for name, c in summary["classes"].items() for row in c["by_draft_len"].values()):
        lead = (escape(name), str(row["draft_len"]))
        rates = (_num(row["acceptance_rate"]), _num(row["mean_accepted_len"]))
        acceptance.add_row(*lead, *(str(row[key]) for key in COUNTS), *rates)
        speeds = (_num(row[key], "{:.1f}") for key in ("verify_ms", "tok_per_s", "baseline_tok_per_s"))
        speed.add_row(*lead, _num(row["draft_ms"]), *speeds, _speedup(row), _interval(row), _verdict(row))
        if row["per_position_acceptance"]:
            a_i = " ".join(f"{a:.2f}" for a in row["per_position_acceptance"])
            positions.append(Text(f"a_i {name} k={row['draft_len']}: {a_i}"))
    legend = Hanging(
        Text(
            "prompts: decoded at that k; a row per k a class ran rounds at, k = 0 (plain decoding) its own "
            "row, whose tok/s is the plain column; empty: rounds that proposed nothing; rate = accepted/proposed; "
            "mean = accepted/round; draft, verify: ms per round; tok/s: goodput; speedup = goodput over plain "
            "decoding's, same class, same run, with its 95% interval over prompts (? not yet known, ! noise, "
            "~ busy host: 10%+ of its rounds disturbed); a_i = per-position acceptance",
            style="dim",
        ),
        further=0,  # at column 0, as the tables above it
        whole=[f"{mark} {verdict}" for verdict, mark in VERDICT_MARKS.items()],  # never a lone symbol on a line
    )
    return Group(heading(title, log), acceptance, speed, *positions, legend)


def heading(title: str, log=None) -> Note:
    """A title in bold with `(log: PATH)` kept whole (a table's own title would wrap a path at its width)."""
    logged = f"(log: {log})"
    return Note(f"{title}  {logged}" if log else title, "bold", (logged,))


def _speedup(row: dict) -> str:
    if row["draft_len"] == 0:
        return "-"  # plain decoding over itself is no finding
    verdict = row["speedup_verdict"]
    mark = VERDICT_MARKS.get(verdict, "") if row["speedup"] is not None else ""
    return f"[{VERDICT_COLOURS.get(verdict, 'white')}]{_num(row['speedup'], '{:.2f}×')}{mark}[/]"


def _interval(row: dict) -> str:
    return "-" if row["speedup_low"] is None else f"{row['speedup_low']:.2f}–{row['speedup_high']:.2f}"


def divergence_lines(events) -> Iterator[str]:
    """One line per prompt whose greedy output left plain decoding's, with the logit margin there."""
    for ev in events:
        eq = getattr(ev, "equivalence", None)
        if eq is None or eq.verdict not in ("near-tie", "diverged"):
            continue
        why = (
            f"below the near-tie margin {eq.near_tie_margin:g}"
            if eq.verdict == "near-tie"
            else f"not a near-tie (margin >= {eq.near_tie_margin:g}): a real mismatch"
        )
        yield (
            f"{ev.prompt_id} (k={ev.draft_len}): {eq.verdict} at generated token {eq.first_divergence}, "
            f"plain top-1 minus top-2 logit {_num(eq.margin, '{:.4g}')}, {why}"
        )


def print_host_line(events) -> HostTally:
    """The busy-host warning under a run's table, on stderr; nothing on a quiet host. Returns the tally."""
    host = tally(events)
    if host.line():
        err.print(Note(host.line(), "yellow"))
    return host
