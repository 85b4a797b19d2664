"""The panes, each rendered from ViewState by a pure function tested without an app. Every figure names its
round set: the title says which class and k, the first lines how many rounds and how many proposed nothing."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget
from textual.widgets import DataTable, Static

from specmon.metrics.format import MISSING, count, fmt
from specmon.metrics.interval import SpeedupEstimate
from specmon.tables import VERDICT_COLOURS
from specmon.text import first_fitting, wrap_each
from specmon.tui.state import ViewState

TEXT_STYLES = {"accepted": "green", "correction": "bold red", "bonus": "bold cyan", "plain": "default", "prompt": "dim"}
BARS = "_▁▂▃▄▅▆▇█"  # a zero shows as _, so it is not taken for a gap
EMPTY_MARK = "·"  # a round that proposed nothing, in a sparkline
ALL_ACCEPTED = "all accepted"  # the rejections pane's count of rounds that had no rejection
DEFAULT_WIDTH = 36  # content width before the first layout
FULL_ROWS = 4  # a pane's content rows in a roomy terminal; at 80x24 the top panes have 3 and say less
BORDER_LABEL_MARGIN = 6  # a border label's room: the width less two corners and a rule and a space each side


def bar_line(values: list[float | None], width: int, top: float) -> str:
    """A sparkline of the last `width` values scaled to `top`; None as EMPTY_MARK."""
    values = values[-width:] if width > 0 else []
    return "".join(EMPTY_MARK if v is None else BARS[min(8, max(0, round(8 * v / top)))] for v in values)


def _spark(values: list[float | None], width: int, top: float, style: str) -> Text:
    """bar_line with the empty-round marks dimmed."""
    return Text.assemble(*((ch, "dim" if ch == EMPTY_MARK else style) for ch in bar_line(values, width, top)))


# metric -> (its name on screen, its definition, RunStats' figure over the run)
DEFINITIONS = {
    "acceptance rate": ("acceptance rate", "Σacc/Σprop", "acceptance_rate"),
    "mean accepted length": ("mean accepted length", "Σacc/rounds", "mean_accepted_len"),
    "alpha-hat": ("α̂", "mean Σmin(p,q)", "alpha_hat"),
}


OFF_NOTE = "the class is off"  # a class the policy runs plain has no speculative round coming


def run_title(state: ViewState, what: str, width: int = 80) -> str:
    """A pane's title naming its round set: the current class at its k (the class left out where it cannot fit)."""
    name, k = state.current_class, state.class_k
    if not name:
        return what
    if not k:  # never speculated: switched off before it ran a draft, or not at its k yet
        return first_fitting(width, f"{what} · {name}" + (" (off)" if state.switched_off(name) else ""), what)
    off = "" if state.is_on(name) else " (off)"
    # narrowest, the classes table says on or off
    return first_fitting(
        width, f"{what} · {name} k={k}{off}", f"{what} · k={k}{off}", f"{what} k={k}{off}", f"{what} k={k}"
    )


def round_set(state: ViewState, width: int = DEFAULT_WIDTH) -> str:
    """How many rounds the current run has, with those that proposed nothing apart."""
    run = state.current_run()
    if run is None:
        return OFF_NOTE if state.switched_off(state.current_class) else "no speculative round yet"
    rounds, empty = count(run.rounds, "round"), run.empty_rounds
    proposed = f"{rounds}: {run.rounds - empty} proposed, {empty}"
    return first_fitting(width, f"{proposed} proposed nothing", f"{proposed} empty", f"{rounds}, {empty} empty")


def render_acceptance(state: ViewState, metric: str, width: int = DEFAULT_WIDTH) -> Text:
    """The metric over the current run's rounds, then a sparkline of its last ones (· proposed nothing)."""
    run = state.current_run()
    name, definition, figure = DEFINITIONS[metric]
    overall = getattr(run, figure) if run else None
    headline = Text(f"{name} {fmt(overall)}", style="bold").append(f" ({definition})", style="dim")
    text = Text("\n").join(wrap_each(headline, width, [f"{name} {fmt(overall)}", f"({definition})"]))
    text.append("\n" + round_set(state, width) + "\n", style="dim")
    if metric == "alpha-hat" and run is not None and not run.alpha_rounds:
        text.append("no α̂: this drafter gives no distribution", style="dim")
        return text
    series = state.acceptance_series(metric)
    top = 1.0 if metric != "mean accepted length" else max([float(state.class_k), 1.0])
    text.append_text(_spark(series, width, top, "green"))
    if caption := sparkline_caption(state, metric, width):
        text.append("\n" + caption, style="dim")
    return text


def sparkline_caption(state: ViewState, metric: str, width: int = DEFAULT_WIDTH, drawn: int | None = None) -> str:
    """How many rounds the sparkline draws, `drawn` columns wide (a foot has less room), and what · is."""
    shown = min(len(state.acceptance_series(metric)), width if drawn is None else drawn)
    if not shown:
        return ""
    return first_fitting(
        width, f"last {count(shown, 'round')}; {EMPTY_MARK} proposed nothing", f"last {shown}; {EMPTY_MARK} empty"
    )


def rounds_caption(state: ViewState) -> str:
    """How many rounds the current run's means are over (a pane's subtitle)."""
    run = state.current_run()
    return count(run.rounds, "round") if run else ""


def rejections_caption(state: ViewState, width: int = DEFAULT_WIDTH) -> str:
    """How many of the run's rounds proposed something, the empty ones apart ("" before any)."""
    run = state.current_run()
    if run is None or not run.proposed_gt:
        return ""
    drafted = run.rounds - run.empty_rounds
    return first_fitting(
        width,
        f"{count(drafted, 'round')} proposed; {run.empty_rounds} empty, apart",
        f"{drafted} proposed, {run.empty_rounds} empty",
    )


def render_rejections(state: ViewState, width: int = DEFAULT_WIDTH, rows: int = FULL_ROWS) -> Text:
    """Rejections and a_i per position 0..k-1, as columns or bars; under FULL_ROWS rows the caption is the foot's."""
    run, k = state.current_run(), state.class_k
    if run is None or not run.proposed_gt:
        return Text(OFF_NOTE if state.switched_off(state.current_class) else "no draft proposed yet", style="dim")
    text = Text(rejections_caption(state, width) + "\n" if rows >= FULL_ROWS else "", style="dim")
    positions = max(k, len(run.proposed_gt))
    counts = [run.rejections[i] if i < len(run.rejections) else 0 for i in range(positions)]
    a_i = [run.per_position[i] if i < len(run.per_position) else None for i in range(positions)]
    col = max(4, len(str(max(counts))) + 1)
    room = width - 4 - col * positions  # the last column: rounds with no rejection, not a position
    label = next((name for name in (ALL_ACCEPTED, "all acc") if len(name) + 1 <= room), "")
    whole = f"{label:>{max(len(label) + 1, len(str(run.all_accepted)) + 1)}}"
    if label and len(whole) <= room:
        text.append("pos" + "".join(f"{i:>{col}}" for i in range(positions)) + whole + "\n", style="bold")
        text.append("rej" + "".join(f"{c:>{col}}" for c in counts) + f"{run.all_accepted:>{len(whole)}}\n")
        text.append("a_i" + "".join(f"{_short(a):>{col}}" for a in a_i))
        return text
    top = max(counts + [1])
    text.append(f"pos 0→{positions - 1}, one mark each\n", style="bold")
    text.append("rej ").append_text(_spark([c / top for c in counts], positions, 1.0, "red"))
    text.append(f" {ALL_ACCEPTED} {run.all_accepted}\n")
    text.append("a_i ").append_text(_spark(a_i, positions, 1.0, "green"))
    return text


def _short(value: float | None) -> str:
    """A rate in three characters: .71, 1.0, or - where no round reached the position."""
    if value is None:
        return "-"
    return "1.0" if value >= 0.995 else f"{value:.2f}"[1:]


def render_timing(state: ViewState, width: int = DEFAULT_WIDTH) -> Text:
    """Mean draft, verify and overhead ms per round over the current run; verify ms over its last rounds."""
    run = state.current_run()
    if run is None or not run.rounds:
        return Text("off" if state.switched_off(state.current_class) else "waiting", style="dim")
    text = Text()
    for label, total in (("draft", run.draft_ms), ("verify", run.verify_ms), ("overhead", run.overhead_ms)):
        value = fmt(run.mean_ms(total))
        text.append(f"{label:<8}{value:>{max(width - 8, len(value))}}\n")
    verify = [ev.verify_ms for ev in state.window()]
    text.append("v ", style="dim").append_text(_spark(verify, width - 2, max(verify + [1e-9]), "magenta"))
    return text


def verdict_style(estimate: SpeedupEstimate | None) -> str:
    """The verdict's colour, as every table has it (tables.VERDICT_COLOURS), in bold."""
    colour = VERDICT_COLOURS.get(estimate.verdict) if estimate else None
    return f"bold {colour}" if colour else "bold"


SIDES_WIDTH = 30  # the goodput table's columns; narrower, the sides in the short form


def render_speed(state: ViewState, width: int = DEFAULT_WIDTH, rows: int = FULL_ROWS) -> Text:
    """The speedup estimate (goodput at k over plain), its 95% interval and verdict; then each side's goodput."""
    name, k = state.current_class, state.class_k
    stats = state.classes.get(name)
    run, base = state.current_run(), (stats.baseline if stats else None)
    estimate = state.speedup_estimate(name, k)
    head = Text()
    if estimate is None or estimate.ratio is None:  # why: the pane divides goodput at k by plain's (k = 0 rounds)
        if run is None or not run.rounds:
            why = OFF_NOTE if state.switched_off(name) else "no round at k yet"
        elif base is not None and base.rounds:
            why = "no time measured"
        elif state.policy_session and state.is_on(name):  # no plain round comes while it stays on
            why = "policy ran no plain"
        else:
            why = "no plain round yet"
        head.append("speedup N/A", style="bold").append(f": {why}", style="dim")
    else:
        style = verdict_style(estimate)
        head.append(f"{estimate.ratio:.2f}×", style=style)
        if estimate.low is not None:
            head.append(f" [{estimate.low:.2f}–{estimate.high:.2f}]")
        head.append(f" {estimate.verdict}", style=style)
        if estimate.verdict == "noise":
            head.append(f" > {estimate.bound:.2f}×", style="dim")
        elif estimate.low is None:
            head.append(" (1 prompt)", style="dim")
    text = Text("\n").join(wrap_each(head, width, [estimate.verdict, "(1 prompt)"] if estimate else [])).append("\n")
    if rows < FULL_ROWS or width < SIDES_WIDTH:
        return text.append_text(Text("\n").join(wrap_each(_sides_short(run, base), width)))
    text.append(f"{'goodput':<7}{'tok/s':>6}{'rounds':>8}{'prompts':>9}", style="dim")
    for label, side in (("spec", run), ("plain", base)):  # goodput, rounds, and the prompts they ran on
        figures = [fmt(side.tok_per_s, "{:.1f}"), side.rounds, side.prompts] if side and side.rounds else [MISSING]
        text.append(f"\n{label:<6}" + "".join(f"{figure:>{w}}" for figure, w in zip(figures, (7, 8, 9))))
    return text


def _sides_short(run, base) -> Text:
    """Both sides in two lines: goodput, then rounds and prompts, spec / plain."""
    sides = [r if r is not None and r.rounds else None for r in (run, base)]
    spec, plain = (fmt(r and r.tok_per_s, "{:.1f}") for r in sides)
    many = lambda what: "/".join(str(getattr(r, what)) if r else "0" for r in sides)  # noqa: E731
    text = Text(f"spec {spec} · plain {plain} tok/s\n")
    text.append(f"rounds {many('rounds')}", "dim")
    return text.append(f" · prompts {many('prompts')}", "dim")  # two spans, as the snapshots have them


def render_memory(state: ViewState, rows: int = FULL_ROWS) -> Text:
    """VRAM used of total, RSS, each KV cache in MiB (under FULL_ROWS rows: VRAM on a line, the caches' total)."""
    gib = lambda b: f"{b / 2**30:.2f} GiB"  # noqa: E731
    sample, short, text = state.resource, rows < FULL_ROWS, Text()
    used, total = (sample.vram_used_bytes, sample.vram_total_bytes) if sample else (None, None)
    if used is None or total is None:
        text.append(f"VRAM {MISSING}\n", style="dim")
    else:
        text.append(
            f"VRAM {used / 2**30:.1f}/{total / 2**30:.0f}G\n" if short else f"VRAM {gib(used)}\n  of {gib(total)}\n"
        )
    if sample and sample.rss_bytes is not None:
        text.append(f"RSS  {gib(sample.rss_bytes)}")
    elif state.round_mem_bytes:  # no resource sample yet: the rounds' own memory figure
        on_gpu = bool(state.session and state.session.device.startswith("cuda"))
        text.append(f"{'GPU ' if on_gpu else 'RSS '} {gib(state.round_mem_bytes)}")
    else:
        text.append(f"RSS  {MISSING}", style="dim")
    caches = state.session.cache_bytes if state.session else {}
    if caches and short:
        text.append(f"\nKV {sum(caches.values()) / 2**20:.0f} MiB", style="dim")
    elif caches:
        text.append("\nKV cache MiB" + "".join(f"\n {name} {size / 2**20:.0f}" for name, size in caches.items()), "dim")
    return text


def render_text(state: ViewState) -> Text:
    text = Text.assemble(*((span.text, TEXT_STYLES[span.kind]) for span in state.text))
    text.rstrip()  # a trailing newline would leave the pane's last line blank
    return text


def legend() -> Text:
    return Text.assemble(*((f" {kind} ", TEXT_STYLES[kind]) for kind in ("accepted", "correction", "bonus", "plain")))


class TitleBar(Widget):
    """The one-line title: `render_to(width)` at its width whenever it is drawn (a refresh, a resize)."""

    def __init__(self, render_to, **kwargs):
        super().__init__(**kwargs)
        self.render_to = render_to

    def render(self) -> Text:
        return self.render_to(self.content_size.width)


class Pane(Static):
    """A bordered Static redrawn on each batch and width change by `render_to`, `title_to`, `subtitle_to` (width)."""

    def __init__(self, title: str, render_to, title_to=None, subtitle_to=None, **kwargs):
        super().__init__(**kwargs)
        self.border_title = title
        self.render_to, self.title_to, self.subtitle_to = render_to, title_to, subtitle_to

    def redraw(self) -> None:
        for label, label_to in (("border_title", self.title_to), ("border_subtitle", self.subtitle_to)):
            if label_to is not None:
                text = label_to(max(self.outer_size.width - BORDER_LABEL_MARGIN, 0))
                if text != getattr(self, label):  # setting a title repaints, even the same one
                    setattr(self, label, text)
        self.update(self.render_to(self.content_size.width or DEFAULT_WIDTH), layout=False)  # a grid cell's size is set

    def on_resize(self) -> None:
        if self.content_size.width and not self.app.paused:  # a paused view stays as it was
            self.redraw()


class DecisionsTable(DataTable):
    """The decisions pane: its class column ends a blank short of the scrollbar, which never lands on a name."""

    def on_resize(self) -> None:
        self.fit_last_column()

    def fit_last_column(self) -> None:
        columns = list(self.columns.values())
        if not columns or not self.content_size.width:
            return
        room = self.content_size.width - sum(c.width for c in columns[:-1]) - 2  # the scrollbar's column and a blank
        if columns[-1].width != max(room, 1):
            columns[-1].width = max(room, 1)
            self._require_update_dimensions = True  # DataTable re-measures its columns on the next refresh
            self.refresh()
