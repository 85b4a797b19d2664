"""The served-traffic view's panes (a watch, a proxy): pure renderers from ServedState. Every figure says the span
it covers: the last read's window, the last RECENT_S (the seconds read, while fewer), or the whole session."""

from __future__ import annotations

import re

from rich.text import Text

from specmon.metrics import served, unreported
from specmon.metrics.format import clock, count, fmt, ratio_interval
from specmon.metrics.served import NO_METRICS, PROXY_CLOCK, RECENT_S
from specmon.text import Part, cut, fill, first_fitting, title as titled, wrap, wrap_each
from specmon.tui.panes import bar_line
from specmon.tui.served_state import ServedState

FULL, EMPTY = "█", "░"
COLUMN_GAP = 2  # blanks between columns of position bars
MIN_NAME = 6  # a class name's column where tokens/step keeps its own; without it, a column narrower by one
MIN_BAR = 4  # a bar shorter than this says less than the rate beside it: the rates alone then


def server_state(state: ServedState) -> tuple[list[str], str]:
    """(wordings, longest first, and style) for the title: up since our first good read, down since, or not read."""
    last = state.last
    if state.finished is not None:
        return [f"finished ({state.finished.reason})", "finished"], "dim"
    if last is None:
        return ["not read yet"], "yellow"
    if NO_METRICS in last.error:  # an upstream without Prometheus (the proxy measures its replies): no fault
        return ["no /metrics: figures from its replies", "no /metrics"], ""
    if last.error:
        since = next((t for t, what, _ in reversed(state.changes) if what in ("down", "no counters")), last.t)
        word = "DOWN" if last.error.startswith("down") else "NO COUNTERS"
        return [f"{word} since {clock(since)}", word], "bold red"
    return [f"up, seen since {clock(state.up_since or last.t)}", "up"], "green"


# what gives way, a step at a time, where the title is too narrow: the name's schemes, the proxy's own
# address, when the server was seen up since, its kind; then the name is cut, never the lead or an alert
SHORTEN_STEPS = ("name", "name", "state", "kind")


def title(state: ServedState, name: str, alerts: list[str], width: int, lead: str = "") -> Text:
    """`watch http://… · llama-server · up, seen since 12:03:04 · ALERTS` after `lead`, fitted by SHORTEN_STEPS."""
    kind = (state.last_good.kind if state.last_good else "") or (state.started.drafter if state.started else "")
    words, style = server_state(state)
    parts = [Part("lead", [lead], "bold")] if lead else []
    # shorter: without URL schemes (a socket path by its file name alone), then without the proxy's own address
    bare = re.sub(r"(?<![\w/])/\S*/", "", re.sub(r"\b[a-z][a-z0-9+.-]*://", "", name))
    upstream_only = re.sub(r"^(\w+): \S+ -> ", r"\1 -> ", bare)  # `proxy: A -> B` as `proxy -> B`
    parts.append(Part("name", list(dict.fromkeys([name, bare, upstream_only])), "bold"))
    parts += [Part("kind", [kind, ""])] if kind else []
    parts.append(Part("state", words, style))
    parts += [Part(f"alert{i}", [alert], "bold yellow") for i, alert in enumerate(alerts)]
    return titled(parts, SHORTEN_STEPS, max(width, 1), cut_part="name")


def recent_span(w: served.Window | None) -> str:
    """What the recent figures span: the last RECENT_S once that much is read, else the seconds read so far."""
    return f"last {RECENT_S if w is None else min(w.seconds, RECENT_S):.0f} s"


def render_acceptance(state: ServedState, width: int, height: int | None = None) -> Text:
    """Acceptance over the recent span, a mark per read, then the marks' key where `height` leaves it a line."""
    w = state.recent()
    if w is None or not w.drafts:
        lines = [Text(f"no drafts in the {recent_span(w)}", style="dim")]
    else:
        drafts = f"{count(w.drafts, 'draft')}, {w.draft_tokens} drafted, {w.accepted} accepted"
        lines = acceptance_lines(w, width, "") + wrap_each(drafts, width)
    rates = [None if x is None or not x.drafts else x.acceptance for x in state.windows]
    lines.append(Text(bar_line(rates, width, top=1.0), style="cyan"))
    if height is None or len(lines) < height:
        lines.append(Text(first_fitting(width, "a mark per read; · no drafts", "a mark a read; · none"), style="dim"))
    return Text("\n").join(lines)


def acceptance_lines(w: served.Window, width: int, rest: str = "bold") -> list[Text]:
    """`acceptance 0.58  accepted/draft 25.00` in `width`, wrapped between the pairs, never inside one."""
    pair = (f"acceptance {fmt(w.acceptance)}", f"accepted/draft {fmt(w.accepted_per_draft)}")
    text = Text().append(pair[0], style="bold").append(f"  {pair[1]}", style=rest)
    return wrap_each(text, width, whole=pair)


def render_positions(state: ServedState, width: int, height: int | None = None) -> Text:
    """Acceptance by draft position over the recent span: a bar each in columns, or the rates where bars can't fit."""
    w = state.recent()
    if w is None or not w.drafts:
        return Text(f"no drafts in the {recent_span(w)}", style="dim")
    rates = w.position_rates()
    cells = served.position_cells(rates)
    columns = -(-len(cells) // height) if height and cells else 1
    rows = -(-len(cells) // columns)
    label_width = max([2, *(len(label) for label, _, _ in cells)])
    bar_width = (width - 1 - COLUMN_GAP * (columns - 1)) // columns - label_width - 6  # label, bar, rate, blanks
    if not cells or bar_width < MIN_BAR:  # no bar to draw (no `_per_pos` metric), or too short: the rates alone
        return Text("\n".join(fitted_position_rates(rates, width, height, "pos")))
    text = Text()
    for row in range(rows):
        for column, (label, rate, _) in enumerate(cells[row::rows]):
            filled = round((rate or 0.0) * bar_width)
            text.append((" " * COLUMN_GAP if column else "") + f"{label:>{label_width}} ")
            text.append(FULL * filled, style="green")
            text.append(EMPTY * (bar_width - filled), style="dim")
            text.append(f" {fmt(rate):>4}")
        text.append("\n")
    text.rstrip()
    return text


def fitted_position_rates(rates: list[float | None], width: int, most: int | None = None, label: str = "by position"):
    """`label` and each position's rate, wrapped to `width`; past `most` lines the rest counted (…+N)."""
    cells = [(served.position_cell_text(*cell), cell[2]) for cell in served.position_cells(rates)]
    if not cells:
        return [f"{label} -"]
    lines: list[list[tuple[str, int]]] = [[]]
    for cell in cells:
        if lines[-1] and len(_position_line(label, lines[-1] + [cell], len(lines) > 1)) > width:
            lines.append([])
        lines[-1].append(cell)
    more = ""
    if most is not None and len(lines) > most:
        left = sum(n for line in lines[most:] for _, n in line)
        lines = lines[:most]
        while len(lines[-1]) > 1 and len(_position_line(label, lines[-1], most > 1)) + len(f" …+{left}") > width:
            left += lines[-1].pop()[1]
        more = f" …+{left}"
    fitted = [_position_line(label, line, i > 0) for i, line in enumerate(lines)]
    return fitted[:-1] + [fitted[-1] + more]


def _position_line(label: str, cells: list[tuple[str, int]], continued: bool) -> str:
    """One line of fitted_position_rates: the label, or blanks under it on a continued line, then the cells."""
    return " ".join([" " * len(label) if continued else label, *(word for word, _ in cells)])


def render_rates(state: ServedState, width: int) -> Text:
    last, w = state.last_good, state.last_window()
    if w is None or last is None:
        return Text("\n").join(wrap_each(Text("one more read and the first window is known", "dim"), width))
    pair = _rates(w)
    lines = wrap_each(Text(f"{pair[0]}  {pair[1]}, all slots", "bold"), width, pair)  # over all the server's slots
    span = f"({w.seconds:.1f} s)"
    lines += wrap_each(Text(f"window {clock(w.start)}-{clock(w.start + w.seconds)} {span}", "dim"), width, [span])
    if (recent := state.recent()) is not None:
        pair = _rates(recent)
        lines += wrap_each(f"{recent_span(recent)}: {' '.join(pair)}", width, pair)
    now = Text(f"running {fmt(last.running, '{}')}  waiting {fmt(last.waiting, '{}')}", style="bold")
    now.append(f" at {clock(last.t)}", style="dim")
    return Text("\n").join(lines + wrap_each(now, width))


def _rates(w: served.Window) -> list[str]:
    """A window's drafts/s and tok/s, each a figure with its unit (kept on one line)."""
    return [f"{fmt(w.drafts_per_s, '{:.1f}')} drafts/s", f"{fmt(w.tokens_per_s, '{:.1f}')} tok/s"]


def render_server(state: ServedState, width: int) -> Text:
    """The server's state, then its changes, newest first (each one line, cut to the width with …)."""
    words, style = server_state(state)
    text = Text(words[0], style=style)
    if state.last is not None and state.last.error:
        text.append("\n" + cut(state.last.error, max(width, 1)), style="dim" if style == "" else "red")
    for t, what, detail in reversed(state.changes):
        line = f"{clock(t)} {what}" + (f": {detail}" if detail and what == "restarted" else "")
        text.append("\n" + cut(line, max(width, 1)), style="dim")
    return text


def render_totals(state: ServedState, width: int, height: int | None = None) -> Text:
    w = state.total()
    span = f"{count(state.restarts, 'restart')}, {count(state.failed_reads, 'failed read')}"
    if w is None:
        return Text("\n").join(wrap_each(Text(f"no two good reads yet ({span})", "dim"), width))
    head = wrap_each(Text(f"since {clock(w.start)}, {w.seconds:.0f} s read\n{span}", "dim"), width)
    head += wrap_each(f"drafts {w.drafts}  drafted {w.draft_tokens}  accepted {w.accepted}", width)
    head += acceptance_lines(w, width)
    most = None if height is None else max(height - len(head), 1)  # the rows the lines above leave, as drawn
    positions = "\n".join(fitted_position_rates(w.position_rates(), max(width, 1), most))
    return Text("\n").join([*head, Text(positions)])


def render_classes(state: ServedState, width: int, height: int | None = None) -> Text:
    """Requests by (class, upstream) with what its replies said (served.add_request's sums), its notes and routes,
    fitted to `height` lines: the notes at the foot kept whole, rows left out counted."""
    if not state.requests:
        seen = f" ({count(state.requests_seen, 'request')}, none answered 2xx)" if state.requests_seen else ""
        return Text(f"no proxied requests{seen}", style="dim")
    clocks = {key: state.clock(key[0]) for key in state.requests}
    speeds = {key: served.tok_per_s_text(t.tok_per_s_on(clocks[key]), clocks[key]) for key, t in state.requests.items()}
    speed_width = max(5, *map(len, speeds.values()))  # a `111.1*` takes its column from the name
    per_step = width - 21 - speed_width >= MIN_NAME  # narrower (a 60-column terminal), tokens/step gives way
    name_width = max(width - (21 if per_step else 16) - speed_width, MIN_NAME - 1)  # at 80x24 a name keeps 10
    t_st = f" {'t/st':>4}" if per_step else ""
    head = f"{'class':<{name_width}} {'via':<5} {'req':>3} {'acc':>4}{t_st} {'tok/s':>{speed_width}}"
    blocks = []
    for (cls, upstream), totals in sorted(state.requests.items()):
        acc = fmt(totals.acceptance) if totals.reported else unreported.missing_counts(upstream)
        t_st = f" {fmt(totals.tokens_per_step):>4}" if per_step else ""
        speed = speeds[(cls, upstream)].rjust(speed_width)
        row = f"{fill(cls, name_width)} {fill(upstream, 5)} {totals.requests:>3} {acc:>4}{t_st} {speed}"
        lines = totals.accepted_per_pos and fitted_position_rates(
            totals.position_rates(), max(width, 1), 2, "  by position"
        )
        blocks.append([(row, ""), *((line, "dim") for line in lines or ())])  # by position where replies gave it
    for cls, d in sorted(state.routes.items()):  # where routing sent the class last, and on what
        r, advised = d.route, "" if d.applied else " (advised)"
        on = served.CLOCKED if r.clock == PROXY_CLOCK else ""  # a ratio on the proxy's clock marked *, as the rows
        line = f"{cls} → {r.side_to}{advised} {ratio_interval(r.ratio, r.low, r.high)}{on} at {clock(d.t)}"
        blocks.append([(cut(line, max(width, 1)), "bold" if d.applied else "dim")])
    foot = _class_notes(state, width)
    room = None if height is None else height - 1 - len(foot)
    text = Text(head + "\n", "bold")
    for line, style in [*_fitted(blocks, room), *foot]:
        text.append(line + "\n", style=style)
    text.rstrip()
    return text


def _class_notes(state: ServedState, width: int) -> list[tuple[str, str]]:
    """The keys to the table's marks, then each silent upstream's notice, wrapped whole to the width."""
    rows = state.requests.items()
    notices = state.silence.notices(short=True)  # each upstream's, in the light of its /metrics and replies
    # a notice explains the spec rows' n/r; without one they need the key (a plain row's is `-`)
    unexplained = not notices and any(not t.reported and side == unreported.SPEC for (_, side), t in rows)
    keys = ["n/r: no draft counts reported"] if unexplained else []
    keys += ["* the proxy's clock"] if any(state.clock(cls) == PROXY_CLOCK for (cls, _), _ in rows) else []
    keys += ["→ routed, by spec/plain goodput"] if state.routes else []
    lines = [(cut("; ".join(keys), max(width, 1)), "dim")] if keys else []
    for notice in notices:
        lines += [(line.plain, "yellow") for line in wrap(notice, max(width, 1), indent="")]
    return lines


def _fitted(blocks: list[list[tuple[str, str]]], room: int | None) -> list[tuple[str, str]]:
    """The blocks' lines within `room` (None: no limit), whole blocks only, the last line counting those left out."""
    if room is None or sum(len(b) for b in blocks) <= room:
        return [line for block in blocks for line in block]
    if room <= 0:
        return []
    kept: list[tuple[str, str]] = []
    for shown, block in enumerate(blocks):
        if len(kept) + len(block) > room - 1:
            return kept + [(f"… {len(blocks) - shown} more rows (log info has all)", "dim")]
        kept += block
    return kept
