"""`specmon report LOG`: per-class tables and PNG plots tied together in a Markdown page.

Every plotted number is also written to report.json, so the figures can be checked against
the log (and are, in the tests)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from specmon.text import wrapped_lines
from specmon.errors import SpecmonError
from specmon.events.log import read_log
from specmon.events.schema import RoundVerified
from specmon.metrics.contention import tally
from specmon.metrics.format import count, fmt, markdown_cell
from specmon.metrics.interval import MIN_PROMPTS, tok_per_s_interval
from specmon.metrics.served import SERVED_BACKENDS
from specmon.metrics.served_summary import markdown as served_markdown, served_summary
from specmon.metrics.stats import RunStats, class_stats, summary
from specmon.replay.report_policy import policy_history, policy_markdown

ROUND_PLOTS = ("acceptance_by_position.png", "timing.png", "goodput_by_k.png", "acceptance_over_time.png")
WINDOW = 32  # rounds per point on the acceptance-over-time plot
PANELS_A_ROW = 5  # goodput_by_k: a panel per class, this many side by side


def build_report(log: Path, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    events = list(read_log(log))
    rounds = [ev for ev in events if isinstance(ev, RoundVerified)]
    stats, host = class_stats(events), tally(rounds)

    def per_run(figure, by_k: bool = False, plain: bool = True) -> dict:
        """{class: {k: figure(run)}}, the runs in the order run (`by_k`: k rising), k = 0 unless not `plain`."""
        runs = {c: sorted(s.runs.items()) if by_k else s.runs.items() for c, s in stats.items()}
        return {c: {str(k): figure(r) for k, r in each if k or plain} for c, each in runs.items()}

    data = {
        "log": str(log),
        "summary": summary(stats),
        "acceptance_by_position": per_run(lambda r: r.per_position, plain=False),
        "timing_ms": per_run(lambda r: [r.mean_ms(r.draft_ms), r.mean_ms(r.verify_ms), r.mean_ms(r.overhead_ms)]),
        "goodput_tok_per_s": per_run(lambda r: r.tok_per_s, by_k=True),
        "goodput_interval_tok_per_s": per_run(lambda r: tok_per_s_interval(r.prompt_totals), by_k=True),
        **_over_time(rounds),
        "policy": policy_history(events),
        # the rounds the host disturbed (metrics.contention): counts, when, and the phrase the tables print
        "host": {**host.figures(), "first": host.first_t, "last": host.last_t, "said": host.said()},
    }
    if events and getattr(events[0], "backend", "") in SERVED_BACKENDS:  # a server's traffic: its own section
        data["served"] = served_summary(log)
    data["round_plots"] = bool(rounds) or "served" not in data  # a server's log has no rounds to plot
    try:
        return _write(data, out)
    except OSError as exc:  # a read-only folder, a full disk, a path through a file
        raise SpecmonError(
            f"report: cannot write {exc.filename or out} ({exc.strerror or exc}); pick another folder with --out"
        ) from None


def _write(data: dict, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    every = dict(zip(ROUND_PLOTS, (_plot_positions, _plot_timing, _plot_goodput, over_time_figure)))
    plots = every if data["round_plots"] else {}
    for name, plot in plots.items():
        save_figure(plot(data), out / name)
    for name in every.keys() - plots.keys():  # a server's report in a folder an earlier report drew in
        (out / name).unlink(missing_ok=True)
    (out / "report.json").write_text(json.dumps(data, indent=1))
    page = out / "report.md"
    page.write_text(_markdown(data, list(plots)))
    return page


def plot_label(text: str) -> str:
    """A class name as matplotlib shows it: `$` would start mathtext (and fail on unbalanced ones)."""
    return text.replace("$", r"\$")


def _over_time(rounds: list[RoundVerified]) -> dict:
    """Acceptance rate per block of WINDOW proposing rounds, per class, and why the plot has no point (or None)."""
    series: dict[str, list[float]] = {}
    blocks: dict[str, RunStats] = {}
    proposing = Counter(ev.prompt_class for ev in rounds if ev.proposed)
    for ev in rounds:
        if not ev.proposed:
            continue
        block = blocks.setdefault(ev.prompt_class, RunStats(ev.draft_len))
        block.add_round(ev)
        if block.rounds == WINDOW:
            series.setdefault(ev.prompt_class, []).append(block.acceptance_rate)
            del blocks[ev.prompt_class]
    why = None
    if not proposing:
        why = "no round proposed a draft token: nothing to measure acceptance on"
    elif not series:
        name, most = proposing.most_common(1)[0]
        why = (
            f"no class has {WINDOW} rounds that proposed drafts (one point per {WINDOW}); the most is {most}, in {name}"
        )
    return {"acceptance_over_time": series, "acceptance_over_time_empty": why}


def figure(title: str, size: tuple[float, float] = (7, 4)):
    """One titled, gridded axes at 100 dpi (the report's plots and the sweep's)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=size, dpi=100)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return fig, ax


def save_figure(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path)
    import matplotlib.pyplot as plt

    plt.close(fig)


def _plot_positions(data: dict):
    fig, ax = figure("acceptance by draft position (a_i)")
    for cls, by_k in data["acceptance_by_position"].items():
        for k, values in by_k.items():
            if values:
                ax.plot(range(len(values)), values, marker="o", label=plot_label(f"{cls} k={k}"))
    ax.set_xlabel("draft position i")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("rounds with accepted > i / rounds with proposed > i")
    ax.set_ylim(0, 1.05)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    else:  # a log whose rounds never drafted has no series
        _say_empty(ax, "no round proposed a draft token; no position to measure acceptance at")
    return fig


def _plot_timing(data: dict):
    fig, ax = figure("per-round time: draft vs verify vs overhead (ms)")
    bars = [
        (plot_label(f"{cls}\nk={k}"), *(ms or 0.0 for ms in times))
        for cls, by_k in data["timing_ms"].items()
        for k, times in by_k.items()
    ]
    labels, draft, verify, overhead = zip(*bars) if bars else ((), (), (), ())
    ax.bar(labels, draft, label="draft")
    ax.bar(labels, verify, bottom=draft, label="verify")
    ax.bar(labels, overhead, bottom=[a + b for a, b in zip(draft, verify)], label="overhead")
    ax.tick_params(axis="x", labelsize=8, labelrotation=30)
    ax.set_ylabel("ms per round")
    ax.legend()
    if not labels:
        _say_empty(ax, "no rounds in the log")
    return fig


def _plot_goodput(data: dict):
    """A panel per class at the k it measured (a policy runs each class at its own k: on one axis
    one class's k stood beside another's), points with their 95% interval over prompts; one y
    scale from 0, so panels compare by height."""
    import matplotlib.pyplot as plt

    classes = list(data["goodput_tok_per_s"]) or [""]
    cols = min(len(classes), PANELS_A_ROW)
    rows = -(-len(classes) // cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(max(7.0, 2.2 * cols), 1.0 + 2.8 * rows), dpi=100, sharey=True, squeeze=False
    )
    fig.suptitle("goodput by draft length k (0 = plain), a panel per class, 95% interval over prompts", fontsize=10)
    for ax, cls in zip(axes.flat, classes):
        by_k = data["goodput_tok_per_s"].get(cls, {})
        spans = data["goodput_interval_tok_per_s"].get(cls, {})
        ks = [int(k) for k, v in by_k.items() if v is not None]
        for k in ks:  # plain is the square
            value, span = by_k[str(k)], spans[str(k)]
            yerr = [[value - span[0]], [span[1] - value]] if span else None
            ax.errorbar([k], [value], yerr=yerr, fmt="o" if k else "s", capsize=3, color="C0" if k else "C1")
        if not ks:
            _say_empty(ax, "no rounds")
        title = "\n".join(wrapped_lines(cls, 20, "", fold=True))  # a 40-character name, on 2 lines
        ax.set_title(plot_label(title), fontsize=9)
        ax.set_xticks(ks)
        ax.set_xlim(min(ks, default=0) - 0.6, max(ks, default=0) + 0.6)
        ax.set_xlabel("k", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(classes) :]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("emitted tokens / s of round time", fontsize=8)
    axes[0, 0].set_ylim(bottom=0)
    return fig


def over_time_figure(data: dict):
    """A point per block of WINDOW proposing rounds, at the rounds counted by its end: a class with
    one block is one point at WINDOW, on an axis from 0 (not a dot on -0.04..0.04)."""
    fig, ax = figure(f"acceptance rate over time, per block of {WINDOW} rounds that proposed drafts")
    series = data["acceptance_over_time"]
    for (cls, values), marker in zip(series.items(), "os^vD<>ph*"):
        ax.plot([WINDOW * (i + 1) for i in range(len(values))], values, marker=marker, label=plot_label(cls))
    ax.set_xlabel(f"rounds that proposed drafts, per class (block end; {WINDOW} a block)")
    ax.set_ylabel("acceptance rate (Σaccepted / Σproposed)")
    ax.set_ylim(0, 1.05)
    if series:
        blocks = max(len(v) for v in series.values())
        ax.set_xlim(0, WINDOW * (blocks + 0.5))
        ax.set_xticks([WINDOW * i for i in range(blocks + 1)] if blocks <= 12 else ax.get_xticks())
        ax.legend(fontsize=7)
    else:
        _say_empty(ax, data["acceptance_over_time_empty"] or "no data")
    return fig


def _say_empty(ax, why: str) -> None:
    """An empty frame would look like a broken plot: say why it is empty, a clause a line."""
    ax.text(0.5, 0.5, plot_label(why).replace("; ", ";\n"), ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])


def _span(row: dict) -> str:
    """The 95% interval with its verdict, or what the log lacks for one: no more rounds will come."""
    if row["baseline_tok_per_s"] is None:
        return "- (no plain rounds of this class in the log)"
    if row["speedup_low"] is None:
        at_k, plain = row["speedup_prompts"]
        return (
            f"- ({count(at_k, 'prompt')} at k={row['draft_len']}, {plain} plain: "
            f"an interval needs {MIN_PROMPTS} a side)"
        )
    return f"{row['speedup_low']:.2f}–{row['speedup_high']:.2f} ({row['speedup_verdict']})"


def _summary_line(cls: str, row: dict) -> str:
    """One (class, k) row of the summary table; at k = 0 no speedup (plain over itself is no finding)."""
    if not row["draft_len"]:
        speedup = "- | -"
    else:  # no plain side: no speedup, and the interval column says why
        speedup = f"{'-' if row['speedup'] is None else format(row['speedup'], '.2f') + '×'} | {_span(row)}"
    return (
        f"| {markdown_cell(cls)} | {row['draft_len']} | {row['rounds']} | {fmt(row['acceptance_rate'])} | "
        f"{fmt(row['mean_accepted_len'])} | {fmt(row['tok_per_s'], '{:.1f}')} | "
        f"{fmt(row['baseline_tok_per_s'], '{:.1f}')} | {speedup} |"
    )


def _markdown(data: dict, plots: list[str]) -> str:
    host = data["host"]["said"]
    lines = [
        f"# specmon report: {Path(data['log']).name}",
        "",
        *([f"Host: {host}.", ""] if host else []),
    ]
    if data["round_plots"]:  # the summary table: a row per class and k the log ran rounds at
        rows = data["summary"]["classes"].items()
        lines += [
            "A row per class and k it ran rounds at; k = 0 is plain decoding, each speedup's plain side.",
            "",
            "| class | k | rounds | acceptance | mean accepted | tok/s | plain tok/s | speedup | 95% interval |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
            *(_summary_line(cls, row) for cls, c in rows for row in c["by_draft_len"].values()),
        ]
    else:
        lines.append(
            "A server's log has no rounds: specmon decoded nothing, it read the server. "
            "The served traffic section below holds its figures."
        )
    lines += policy_markdown(data["policy"])
    if data.get("served"):
        lines += served_markdown(data["served"])
    lines.append("")
    lines += [f"![{name}]({name})" for name in plots]
    return "\n".join(lines) + "\n"
