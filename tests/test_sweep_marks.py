"""What the sweep's tables and plot say beside a figure: a busy host's `~` (as run and log info
mark it), a break-even that is any acceptance, and a legend that hides no point."""

from pathlib import Path

import pytest
from rich.console import Console

from specmon.replay.sweep_tables import break_even_table, paths_note, results_table
from specmon.events.schema import Sampling
from specmon.metrics.contention import tally
from specmon.replay.sweep_report import cell_rows, goodput_figure, predicted_figure
from events import prompt_started, round_verified

T0 = 1_700_000_000.0


def _cell_events(
    prompt_class: str,
    k: int,
    verify_ms: float,
    stall_ms: float | None,
    prompts: int = 3,
    accepted: int = 1,
    stalled_prompts: int | None = None,
) -> list:
    """`prompts` runs of one cell, 20 rounds each; a drafting round proposes k and accepts `accepted`;
    the host stalls the rounds of the first `stalled_prompts` (all of them where None) by `stall_ms`."""
    events = []
    for p in range(prompts):
        run = {"session_id": "s", "t": T0, "prompt_id": f"{prompt_class}-{p}", "prompt_class": prompt_class}
        run |= {"draft_len": k, "sampling": Sampling()}
        events.append(prompt_started(**run))
        taken = min(k, accepted)
        drafted = {"proposed": [1] * k, "accepted": taken, "rejection_pos": taken if taken < k else None}
        drafted |= {"emitted": [1] * (taken + 1), "draft_ms": 0.01 * k, "target_probs": [0.5] * k}
        stalled = stalled_prompts is None or p < stalled_prompts
        timed = {"verify_ms": verify_ms * (1 + p / 20), "host_stall_ms": stall_ms if stalled else 0.0}
        events += [round_verified(**run, **drafted, **timed, round_id=i, round_index=i) for i in range(20)]
    return events


def _printed(*renderables) -> str:
    console = Console(file=open("/dev/null", "w"), width=80, record=True)
    for r in renderables:
        console.print(r)
    return console.export_text()


def _row_line(text: str, *first: str) -> str:
    (line,) = [line for line in text.splitlines() if line.split()[: len(first)] == list(first)]
    return line


def test_a_busy_hosts_cells_carry_the_tilde_run_and_log_info_print():
    """99.8% CPU pressure stalled two of chat's three prompts: its speedups and break-evens (priced
    on the third's rounds) are marked `~`, as the class table marks a busy host's speedup; a quiet
    class's are not."""
    events = (
        _cell_events("chat", 0, 10.0, stall_ms=9.0, stalled_prompts=2)
        + _cell_events("chat", 2, 12.0, stall_ms=9.0, stalled_prompts=2)
        + _cell_events("rewrite", 0, 10.0, stall_ms=0.0)
        + _cell_events("rewrite", 2, 12.0, stall_ms=0.0)
    )
    assert tally(events).busy
    rows = cell_rows(events)
    busy = {(r.key.prompt_class, r.key.draft_len): r.host.busy for r in rows}
    assert busy == {("chat", 0): True, ("chat", 2): True, ("rewrite", 0): False, ("rewrite", 2): False}
    speed = _printed(results_table(rows, "x.specmon"))
    chat = next(r for r in rows if r.key.prompt_class == "chat" and r.key.draft_len == 2)
    assert _row_line(speed, "chat", "ngram", "greedy", "2", f"{chat.run.mean_ms(chat.run.draft_ms):.2f}").endswith(
        f"{chat.speedup:.2f}×~  {chat.predicted:.2f}×  {chat.gap * 100:+.0f}%"
    )
    quiet = _row_line(speed, "rewrite", "ngram", "greedy", "2", "0.02")
    assert "~" not in quiet
    assert "~ busy host: 10%+ of a cell's rounds and its plain cell's disturbed" in " ".join(speed.split())
    even = _printed(break_even_table(rows))
    assert _row_line(even, "chat", "ngram", "2").split()[4] == f"{chat.break_even:.2f}~"
    assert "~" not in _row_line(even, "rewrite", "ngram", "2")


def test_a_break_even_of_zero_says_any_acceptance_pays_and_why_that_is_suspect():
    """A drafting round that cost no more than a plain step (verify of k+1 tokens at or under one
    plain step: plain steps slowed by other work, or timer noise) breaks even at any acceptance;
    the table says so instead of an unexplained 0.00."""
    events = _cell_events("chat", 0, 10.0, stall_ms=None) + _cell_events("chat", 2, 9.0, stall_ms=None)
    (row,) = [r for r in cell_rows(events) if r.key.draft_len == 2]
    assert row.break_even == pytest.approx(0.0, abs=1e-9) and row.v < 1.0
    assert row.drafting_cost == pytest.approx(2 * row.c + row.v)
    text = _printed(break_even_table(cell_rows(events)))
    assert _row_line(text, "chat", "ngram", "2").split()[3:] == ["60/60", "any", "0.50", "yes"]
    said = " ".join(text.split())
    assert (
        f"chat ngram k=2: break-even at any acceptance: a drafting round cost {row.drafting_cost:.2f} plain "
        f"steps (verify {row.v:.2f}); a verify pass of up to 3 tokens under one plain step means the plain "
        "steps were slowed (a busy host) or timer noise" in said
    )
    assert "0.00" not in _row_line(text, "chat", "ngram", "2")


def test_a_break_even_of_any_acceptance_pays_even_where_nothing_was_accepted():
    """Break-even `any` says zero acceptance pays at the measured cost; a cell that accepted nothing
    pays by that same reckoning (eq. 1 at α = 0: one token for a round that cost a plain step or
    less), so its pays column says yes, not no (the bisection stopped a hair above 0 and 0 < it)."""
    events = _cell_events("chat", 0, 10.0, stall_ms=None) + _cell_events("chat", 2, 9.0, stall_ms=None, accepted=0)
    (row,) = [r for r in cell_rows(events) if r.key.draft_len == 2]
    assert row.run.acceptance_rate == 0.0 and row.drafting_cost <= 1.0
    assert row.break_even == 0.0
    text = _printed(break_even_table(cell_rows(events)))
    assert _row_line(text, "chat", "ngram", "2").split()[3:] == ["60/60", "any", "0.00", "yes"]


def test_notes_under_the_tables_wrap_under_their_text_keeping_a_figure_with_its_unit():
    """At 80 columns a note's continuation lines start two columns in, never at column 0, and
    `0.90 plain steps` stays on one line (it once broke into `cost 0.54 plain ` / `steps ...`)."""
    events = _cell_events("chat", 0, 10.0, stall_ms=None) + _cell_events("chat", 2, 9.0, stall_ms=None)
    text = _printed(break_even_table(cell_rows(events)))
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("chat ngram k=2: break-even at any"))
    assert lines[start:] == [
        "chat ngram k=2: break-even at any acceptance: a drafting round cost",
        "  0.90 plain steps (verify 0.90); a verify pass of up to 3 tokens under",
        "  one plain step means the plain steps were slowed (a busy host) or timer noise",
    ]
    legend = lines[lines.index("chat   ngram    2    60/60           any      0.50         yes") + 1 : start]
    assert legend[0].startswith("break-even: eq. 1") and all(line.startswith("  ") for line in legend[1:])


def test_the_log_and_plots_line_keeps_each_label_with_its_path():
    """`plots: ` once ended a line, its path alone at column 0 below."""
    run = "20261206-025355-0e272c"
    plots = [Path(f"reports/{run}-sweep/sweep_goodput.png"), Path(f"reports/{run}-sweep/sweep_predicted.png")]
    assert _printed(paths_note(Path(f"logs/{run}.specmon"), plots)).splitlines() == [
        f"log: logs/{run}.specmon",
        f"  plots: reports/{run}-sweep/sweep_goodput.png,",
        f"  reports/{run}-sweep/sweep_predicted.png",
    ]


def _drawn(fig):
    """The figure drawn as sweep_plots saves it: (figure, its one axes, the legend's box in pixels)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    fig.tight_layout()
    fig.canvas.draw()
    (ax,) = fig.axes
    return fig, ax, ax.get_legend().get_window_extent()


def test_the_goodput_legend_covers_no_point_and_stays_in_the_figure(tmp_path):
    """Four classes whose plain points sit low at k = 0 (where a lower-left legend once lay over
    them): no plotted point falls inside the legend's box, and the legend is whole in the PNG."""
    events = []
    for name in ("chat", "code-edit", "rewrite", "non-english"):
        events += _cell_events(name, 0, 30.0, None) + _cell_events(name, 2, 12.0, None)
    fig, ax, legend = _drawn(goodput_figure(cell_rows(events)))
    points = [
        ax.transData.transform(xy)
        for container in ax.containers
        for xy in container.lines[0].get_xydata()  # the markers, at k + the class's dodge
    ]
    assert len(points) == 8
    assert [tuple(p) for p in points if legend.contains(*p)] == []
    assert (
        fig.bbox.x0 <= legend.x0 and legend.x1 <= fig.bbox.x1 and fig.bbox.y0 <= legend.y0 <= legend.y1 <= fig.bbox.y1
    )


def test_the_predicted_legend_covers_no_point_and_stays_in_the_figure():
    """Measured against predicted: a cell measured far above its prediction (chat's verify passes
    ten times cheaper than the sweep's) sits upper left, where the legend once lay inside the axes."""
    events = []
    for name, verify_ms in (("chat", 3.0), ("code-edit", 40.0), ("rewrite", 40.0), ("non-english", 40.0)):
        events += _cell_events(name, 0, 30.0, None) + _cell_events(name, 2, verify_ms, None)
    fig, ax, legend = _drawn(predicted_figure(cell_rows(events)))
    points = [ax.transData.transform(xy) for c in ax.collections for xy in c.get_offsets()]
    assert len(points) == 4  # the drafting cells; plain is 1x by definition
    assert [tuple(p) for p in points if legend.contains(*p)] == []
    assert fig.bbox.x0 <= legend.x0 and legend.x1 <= fig.bbox.x1
