"""The panes. Each renders from ViewState through a pure function, tested without an app."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from specmon.metrics.format import MISSING, fmt
from specmon.tui.state import ViewState

TEXT_STYLES = {"accepted": "green", "correction": "bold red", "bonus": "bold cyan", "plain": "default",
               "prompt": "dim"}
BARS = " ▁▂▃▄▅▆▇█"


def bar_line(values: list[float], width: int, top: float | None = None) -> str:
    """A sparkline of the last `width` values scaled to `top` (default: their maximum)."""
    values = values[-width:]
    if not values:
        return ""
    peak = top or max(values) or 1.0
    return "".join(BARS[min(8, max(0, round(8 * v / peak)))] for v in values)


DEFINITIONS = {
    "acceptance rate": "Σacc/Σprop",
    "mean accepted length": "Σacc/rounds",
    "alpha-hat": "mean Σmin(p,q)",
}


def render_acceptance(state: ViewState, metric: str, width: int = 60) -> Text:
    run = state.current_run()
    series = state.acceptance_series(metric)
    top = 1.0 if metric != "mean accepted length" else max([float(state.class_k), 1.0])
    overall = {"acceptance rate": run.acceptance_rate if run else None,
               "mean accepted length": run.mean_accepted_len if run else None,
               "alpha-hat": run.alpha_hat if run else None}[metric]
    text = Text(f"{metric} k={state.class_k}: {fmt(overall)} ", style="bold")
    text.append(f"({DEFINITIONS[metric]}, {len(series)} rounds)\n", style="dim")
    text.append(bar_line(series, width, top), style="green")
    return text


def render_rejections(state: ViewState) -> Text:
    run = state.current_run()
    if run is None or not run.proposed_gt:
        return Text("no draft proposed yet", style="dim")
    total = max(sum(run.rejections) + run.all_accepted, 1)
    lines = Text("pos  first rejection     a_i\n", style="bold")
    per_position = run.per_position
    for pos, a_i in enumerate(per_position):
        count = run.rejections[pos] if pos < len(run.rejections) else 0
        bar = "█" * round(12 * count / total)
        lines.append(f"{pos:>3}  {bar:<12} {count:>4}  {a_i:.2f}\n")
    lines.append(f"all accepted: {run.all_accepted}", style="cyan")
    return lines


def render_timing(state: ViewState, width: int = 50) -> Text:
    run = state.current_run()
    text = Text("per round, ms  ", style="bold")
    if run is None or not run.rounds:
        return text + Text("waiting", style="dim")
    text.append(f"draft {fmt(run.mean_ms(run.draft_ms))}  verify {fmt(run.mean_ms(run.verify_ms))}  "
                f"overhead {fmt(run.mean_ms(run.overhead_ms))}\n")
    top = max(list(state.verify_ms) + list(state.draft_ms) or [1.0])
    text.append("draft  ", style="dim")
    text.append(bar_line(list(state.draft_ms), width, top) + "\n", style="yellow")
    text.append("verify ", style="dim")
    text.append(bar_line(list(state.verify_ms), width, top), style="magenta")
    return text


def render_speed(state: ViewState) -> Text:
    stats = state.classes.get(state.current_class)
    run = state.current_run()
    base = stats.baseline if stats else None
    speedup = stats.speedup(run.draft_len) if stats and run and run.draft_len else None
    colour = "green" if speedup and speedup >= 1.02 else "red" if speedup and speedup < 0.98 else "white"
    text = Text(f"class {state.current_class or '-'}\n", style="bold")
    text.append(f"spec  {fmt(run.tok_per_s if run else None, '{:.1f}')} tok/s\n")
    text.append(f"plain {fmt(base.tok_per_s if base else None, '{:.1f}')} tok/s\n")
    text.append("speedup ")
    text.append(fmt(speedup, "{:.2f}×"), style=f"bold {colour}")
    return text


def render_memory(state: ViewState) -> Text:
    gib = lambda b: None if b is None else b / 2**30  # noqa: E731
    text = Text()
    if state.vram_total is not None:
        text.append(f"VRAM {fmt(gib(state.vram_used))} / {fmt(gib(state.vram_total))} GiB\n")
    else:
        text.append(f"VRAM {MISSING}\n", style="dim")
    text.append(f"RSS  {fmt(gib(state.rss_bytes))} GiB")
    caches = state.session.cache_bytes if state.session else {}
    if caches:
        sizes = ", ".join(f"{name} {size / 2**20:.0f}" for name, size in caches.items())
        text.append(f"\nKV cache MiB: {sizes}", style="dim")
    return text


def class_rows(state: ViewState) -> list[tuple[str, ...]]:
    rows = []
    for name, stats in state.classes.items():
        k = state.draft_len_by_class.get(name, 0)
        run = stats.runs.get(k) if k else None
        speedup = stats.speedup(k) if k else None
        on = "on" if k else "off"
        rows.append((name, str(run.rounds if run else 0), fmt(run.acceptance_rate if run else None),
                     fmt(run.mean_accepted_len if run else None), fmt(speedup, "{:.2f}×"), str(k), on))
    return rows


def render_text(state: ViewState) -> Text:
    text = Text()
    for span in state.text:
        text.append(span.text, style=TEXT_STYLES[span.kind])
    return text


def legend() -> Text:
    text = Text("legend: ")
    for kind in ("accepted", "correction", "bonus", "plain"):
        text.append(f" {kind} ", style=TEXT_STYLES[kind])
    return text


class Pane(Static):
    """A bordered Static whose content is re-rendered from state on each batch."""

    def __init__(self, title: str, **kwargs):
        super().__init__(**kwargs)
        self.border_title = title


def decision_row(d) -> tuple[str, str, str]:
    if d.speculate_from != d.speculate_to:
        change = "on" if d.speculate_to else "off"
    else:
        change = f"k {d.k_from}→{d.k_to}"
    return str(d.decision_id), d.prompt_class, change + ("" if d.applied else " (advised)")


def render_decision(d, cited: list) -> str:
    """What a selected decision was based on: its rule, inputs, thresholds and cited rounds."""
    inputs = ", ".join(f"{k} {v:.4g}" for k, v in d.inputs.items())
    by_k: dict[int, list] = {}
    for ev in cited:
        by_k.setdefault(ev.draft_len, []).append(ev.round_id)
    spans = "; ".join(f"k={k}: {len(ids)} rounds ({ids[0]}…{ids[-1]})" for k, ids in sorted(by_k.items()))
    return (f"decision {d.decision_id} [{d.prompt_class}] by {d.rule_key} (policy line {d.rule_line})\n"
            f"inputs: {inputs}\nthresholds: min_gain {d.thresholds['min_gain']}, hysteresis "
            f"{d.thresholds['hysteresis']}\ncited {len(d.round_ids)} rounds, {len(cited)} held: {spans}")
