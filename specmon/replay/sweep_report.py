"""Sweep results per cell: measured figures beside the speedup their measured proposal mix,
acceptance and verify costs predict, break-even acceptance (eq. 1), and a suggested policy
written through tomlkit."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import tomlkit

from specmon.events.schema import RoundVerified
from specmon.metrics import rates
from specmon.metrics.contention import HostTally
from specmon.metrics.interval import tok_per_s_interval
from specmon.metrics.predict import (
    MIN_ROUNDS,
    TOLERANCE,
    break_even_alpha,
    mix_round_ms,
    mix_tokens_per_round,
    verify_cost_by_len,
)
from specmon.metrics.stats import CellKey, RunStats, cell_stats
from specmon.replay.report import figure, plot_label, save_figure
from specmon.textfile import replace_atomically
from specmon.policy.schema import parse_policy


@dataclass
class CellRow:
    key: CellKey
    run: RunStats
    speedup: float | None
    c: float | None  # one draft step / one plain step, over quiet rounds that drafted (eq. 1's cost, for break-even)
    v: float | None  # a quiet drafting round's verify pass / one quiet plain step
    predicted: float | None  # from the measured proposal mix and verify cost per proposal length
    break_even: float | None
    host: HostTally = field(default_factory=HostTally)  # the cell's rounds and its plain cell's (metrics.contention)

    @property
    def drafting_cost(self) -> float | None:
        """A drafting round's draft and verify time in plain steps (k·c + v); at 1 or under it pays
        at any acceptance, which a verify pass of k+1 tokens under one plain step makes suspect."""
        return None if self.c is None or self.v is None else self.key.draft_len * self.c + self.v

    @property
    def gap(self) -> float | None:
        """measured / predicted - 1: what the proposal mix and verify costs do not explain."""
        return None if not self.predicted or self.speedup is None else self.speedup / self.predicted - 1

    @property
    def flag(self) -> str:
        """Why a cell's prediction is not to be taken at its word: too few rounds, or too far off."""
        if not self.key.draft_len or self.predicted is None:
            return ""
        if self.run.rounds < MIN_ROUNDS:
            return f"< {MIN_ROUNDS} rounds"
        return f"off by {self.gap:+.0%}" if self.gap is not None and abs(self.gap) > TOLERANCE else ""


def cell_rows(events) -> list[CellRow]:
    events = list(events)
    cells = cell_stats(events)
    v = verify_cost_by_len(ev for ev in events if isinstance(ev, RoundVerified))
    ordered = sorted(cells.items(), key=lambda kv: (kv[0].prompt_class, kv[0].drafter, kv[0].draft_len))
    return [_row(key, run, cells.get(CellKey(key.prompt_class, "none", key.sampling, 0)), v) for key, run in ordered]


def _row(key: CellKey, run: RunStats, base: RunStats | None, v_by_len: dict[int, float]) -> CellRow:
    host = run.host + base.host if base is not None and base is not run else run.host  # as a class's speedup
    if base is None or not base.rounds or not run.rounds or not base.goodput:
        return CellRow(key, run, None, None, None, None, None, host)
    step = base.verify_ms / base.rounds
    speedup = rates.speedup(run.goodput, base.goodput)
    if key.draft_len == 0:
        return CellRow(key, run, speedup, None, 1.0, 1.0, None, host)
    predicted = _predicted(run, base, step, v_by_len)
    c, v = _drafting_costs(run, base, key.draft_len)
    need = None if c is None or v is None else break_even_alpha(key.draft_len, c, v)
    return CellRow(key, run, speedup, c, v, predicted, need, host)


def _drafting_costs(run: RunStats, base: RunStats, draft_len: int) -> tuple[float | None, float | None]:
    """Eq. 1's c and v in plain steps, priced on the rounds the host left alone: every round of eq. 1
    proposes k, so its costs are the drafting rounds' (an empty round costs a plain step and gains
    nothing; averaged in, it made drafting look cheap), and a plain step is the plain cell's quiet one
    (stalls had slowed plain steps, not the few drafting rounds: a 3-token verify read 0.54 steps)."""
    drafting, plain = run.quiet_drafted, base.quiet_plain
    step = plain.verify_ms / plain.rounds if plain.rounds else 0.0
    if not drafting.rounds or not step:  # nothing drafted, or no undisturbed plain step to price it by
        return None, None
    return drafting.draft_ms / drafting.rounds / draft_len / step, drafting.verify_ms / drafting.rounds / step


def _predicted(run: RunStats, base: RunStats, step: float, v_by_len: dict[int, float]) -> float | None:
    """Goodput the cell's proposal mix, acceptance and the sweep's verify costs predict, over plain's."""
    over = [run.rounds, *run.proposed_gt, 0]  # rounds that proposed more than -1, 0, 1, ... tokens
    length_share = {n: (over[n] - over[n + 1]) / run.rounds for n in range(len(over) - 1) if over[n] > over[n + 1]}
    tokens = mix_tokens_per_round([n / run.rounds for n in run.proposed_gt], run.per_position)
    round_ms = mix_round_ms(length_share, v_by_len, step, run.mean_ms(run.draft_ms), run.mean_ms(run.overhead_ms))
    return rates.speedup(rates.goodput(tokens, round_ms), base.goodput) if round_ms else None


def suggest_policy(rows: list[CellRow], base_text: str, path: Path, log_name: str) -> dict[str, str]:
    """Best k per class (greedy cells first), or speculation off where no cell beats plain by
    min_gain; each changed line gets a comment naming the sweep log and the figures."""
    doc = tomlkit.parse(base_text)
    min_gain = float(doc.get("policy", {}).get("min_gain", 0.03))
    chosen: dict[str, str] = {}
    classes = {str(c["name"]): c for c in doc.get("classes", [])}
    for name, table in classes.items():
        candidates = [r for r in rows if r.key.prompt_class == name and r.key.draft_len > 0 and r.speedup]
        if not candidates:
            continue
        greedy = [r for r in candidates if r.key.sampling.greedy] or candidates
        best = max(greedy, key=lambda r: r.speedup)
        if best.speedup >= 1 + min_gain:
            table["speculate"] = "on"
            table["draft_len"] = best.key.draft_len
            note = f"sweep {log_name}: {best.key.drafter} k={best.key.draft_len} ran {best.speedup:.2f}x plain"
            table["draft_len"].comment(note)
            chosen[name] = f"on, k={best.key.draft_len} ({best.speedup:.2f}x)"
        else:
            table["speculate"] = "off"
            note = f"sweep {log_name}: best was {best.key.drafter} k={best.key.draft_len} at {best.speedup:.2f}x plain"
            chosen[name] = f"off (best {best.speedup:.2f}x)"
        table["speculate"].comment(note)
    text = tomlkit.dumps(doc)
    parse_policy(text, str(path))  # never write a policy that would not load
    replace_atomically(path, text)
    return chosen


def sampling_label(sampling) -> str:
    """greedy, or T0.9 (with p0.9 where top-p cuts)."""
    if sampling.greedy:
        return "greedy"
    return f"T{sampling.temperature:g}" + ("" if sampling.top_p >= 1.0 else f" p{sampling.top_p:g}")


def sweep_plots(rows: list[CellRow], out: Path) -> list[Path]:
    """goodput by k per class and drafter, and measured against predicted speedup."""
    import matplotlib

    matplotlib.use("Agg")
    out.mkdir(parents=True, exist_ok=True)
    paths = {"sweep_goodput.png": goodput_figure, "sweep_predicted.png": predicted_figure}
    for name, draw in paths.items():
        save_figure(draw(rows), out / name)
    return [out / name for name in paths]


def _goodput_points(cells: list[CellRow]) -> tuple[list[int], list[float], list[list[float]]]:
    """Measured k, goodput in tok/s and the 95% interval's distances below and above (0: one prompt)."""
    ks, values, below, above = [], [], [], []
    for r in sorted(cells, key=lambda r: r.key.draft_len):
        if r.run.tok_per_s is None:
            continue
        span = tok_per_s_interval(r.run.prompt_totals)
        ks.append(r.key.draft_len)
        values.append(r.run.tok_per_s)
        below.append(r.run.tok_per_s - span[0] if span else 0.0)
        above.append(span[1] - r.run.tok_per_s if span else 0.0)
    return ks, values, [below, above]


def goodput_figure(rows: list[CellRow]):
    """Points at the measured k only, with their 95% interval over prompts, y from 0; lines join
    neighbouring k only; plain decoding is its own series at k = 0."""
    import matplotlib.pyplot as plt

    fig, ax = figure("goodput by draft length, 95% interval over prompts", (10, 4.5))  # wider: the legend is beside
    series: dict[tuple, list[CellRow]] = {}
    for r in rows:
        series.setdefault((r.key.prompt_class, r.key.drafter, r.key.sampling), []).append(r)
    classes = list(dict.fromkeys(cls for cls, _, _ in series))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for (cls, drafter, sampling), cells in series.items():
        ks, values, yerr = _goodput_points(cells)
        place = classes.index(cls)
        dodge = (place - (len(classes) - 1) / 2) * 0.06  # classes side by side at one k
        label = f"{cls} · {'plain (k=0)' if drafter == 'none' else drafter} · {sampling_label(sampling)}"
        colour = colours[place % len(colours)]  # a class keeps its colour; plain is the square
        ax.errorbar(
            [k + dodge for k in ks],
            values,
            yerr=yerr,
            fmt="s" if drafter == "none" else "o",
            capsize=3,
            ms=5,
            color=colour,
            label=plot_label(label),
        )
        for i in range(len(ks) - 1):
            if ks[i + 1] == ks[i] + 1:  # a line only where no k between went unmeasured
                ax.plot([k + dodge for k in ks[i : i + 2]], values[i : i + 2], color=colour, linewidth=1)
    ax.set_xticks(sorted({r.key.draft_len for r in rows}))
    ax.set(xlabel="draft length k (only those measured)", ylabel="emitted tokens / s of round time")
    ax.set_ylim(bottom=0)
    outside_legend(ax)
    return fig


def outside_legend(ax) -> None:
    """The legend right of the axes, where it covers no point (inside, plain's low k = 0 points
    lay under it); a column per 20 entries, so a tall one stays within the figure."""
    entries = len(ax.get_legend_handles_labels()[1])
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, ncols=1 + (entries - 1) // 20)


def predicted_figure(rows: list[CellRow]):
    """Measured against predicted speedup, a series per class and drafter; both axes from 0."""
    # wider than the report's plots: the legend is beside the axes
    fig, ax = figure("measured vs predicted speedup, one point per k and sampling", (8.5, 5.5))
    series: dict[tuple, list[CellRow]] = {}
    for r in rows:
        if r.predicted and r.speedup and r.key.draft_len:
            series.setdefault((r.key.prompt_class, r.key.drafter), []).append(r)
    top = 1.5
    for (cls, drafter), cells in series.items():
        ax.scatter(
            [r.predicted for r in cells],
            [r.speedup for r in cells],
            s=16,
            label=plot_label(f"{cls} · {drafter}"),
        )
        top = max([top] + [max(r.predicted, r.speedup) for r in cells])
    ax.plot([0, top * 1.05], [0, top * 1.05], color="grey", linewidth=0.8, label="measured = predicted")
    ax.axhline(1.0, color="grey", linewidth=0.6, linestyle=":", label="1× = plain decoding")
    ax.set(xlabel="predicted speedup (× plain)", ylabel="measured speedup (× plain)")
    ax.set_xlim(0, top * 1.05)
    ax.set_ylim(0, top * 1.05)
    outside_legend(ax)  # inside, upper left, it covered cells measured above their prediction
    return fig
