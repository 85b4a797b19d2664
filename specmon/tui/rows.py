"""The class and decision tables' rows and the title line, as pure functions of ViewState."""

from __future__ import annotations

import time

from rich.text import Text

from specmon.events.schema import Decision
from specmon.metrics.format import MISSING, fmt
from specmon.tui.panes import verdict_style
from specmon.tui.state import ViewState

# (key, header, width, justify): widths fit 80 columns with no cell padding.
CLASS_COLUMNS = [("class", "class", 11, "left"), ("k", "k", 2, "right"), ("rounds", "rounds", 7, "right"),
                 ("empty", "empty", 6, "right"), ("accept", "acc", 5, "right"), ("mean len", "len", 5, "right"),
                 ("speedup", "speedup", 8, "right"), ("spec", " spec", 13, "left")]
DECISION_COLUMNS = [("id", 3), ("to", 6), ("class", 12)]  # cut at the pane's edge when narrower
VERDICT_MARKS = {"faster": "", "slower": "", "not yet known": "?", "noise": "!"}


def class_rows(state: ViewState) -> list[tuple[str, ...]]:
    """Per class, at the k it shows (in force, or the k it ran at before it was switched off):
    rounds, rounds that proposed nothing, acceptance, mean accepted length, speedup (marked ? while
    not yet known, ! when noise), and on, or off with the decision that switched it off."""
    rows = []
    for name in state.classes:
        k = state.shown_k(name)
        run = state.run_for(name)
        estimate = state.speedup_estimate(name, k)
        ratio = estimate.ratio if estimate else None
        speedup = fmt(ratio, "{:.2f}×") + (VERDICT_MARKS.get(estimate.verdict, "") if ratio is not None else "")
        rows.append((name, str(k) if k else "-", str(run.rounds if run else 0), str(run.empty_rounds if run else 0),
                     fmt(run.acceptance_rate if run else None), fmt(run.mean_accepted_len if run else None),
                     speedup, " " + on_off(state, name)))
    return rows


def styled_cells(state: ViewState, row: tuple[str, ...]) -> list[Text]:
    """A row's cells as the table shows them: justified, the speedup coloured by its verdict."""
    estimate = state.speedup_estimate(row[0], state.shown_k(row[0]))
    cells = []
    for (key, _, _, justify), value in zip(CLASS_COLUMNS, row):
        style = ""
        if key == "speedup" and value != MISSING:
            style = verdict_style(estimate)
        elif key == "spec":
            style = "green" if value.strip() == "on" else "dim"
        cells.append(Text(value, style=style, justify=justify))
    return cells


def on_off(state: ViewState, name: str) -> str:
    if name in state.removed:
        return "removed"  # a reload took it out of the policy: no prompt runs by it any more
    if state.is_on(name):
        return "on"
    decision = state.off_by.get(name)
    if decision is None:
        return "off"
    ratio = decision.inputs.get("ratio")
    return f"off d{decision.decision_id}" + (f" ×{ratio:.2f}" if ratio is not None else "")


def policy_figure(state: ViewState) -> str:
    """The figure the policy last decided the current class on, as its decision recorded it: the
    goodput ratio, its 95% interval over prompts and the rounds on each side (k / base)."""
    decision = next((d for d in reversed(state.decisions)
                     if d.prompt_class == state.current_class and not d.thresholds.get("prompt")
                     and not d.match_to), None)  # a min_match decision's ratio is its short matches', not the class's
    if decision is None or "ratio" not in decision.inputs:
        return ""
    i = decision.inputs
    figure = f"d{decision.decision_id} {i['ratio']:.2f}×"
    if i.get("high"):  # decided on an interval (0.0 high: too few prompts for one)
        figure += f" [{i['low']:.2f}–{i['high']:.2f}]"
    if "rounds_spec" in i:
        figure += f" n{i['rounds_spec']:.0f}/{i['rounds_base']:.0f}"
    return figure


def decision_row(d: Decision) -> tuple[str, str, str]:
    if d.speculate_from != d.speculate_to:
        change = f"on k{d.k_to}" if d.speculate_to else "off"
    elif d.k_from != d.k_to:
        change = f"k{d.k_from}→{d.k_to}"
    elif d.match_from != d.match_to:  # drafts from a longer (shorter) match; an older log: the drafter's min_match
        change = f"m{d.match_from}→{d.match_to}"
    else:
        change = "cuts"  # only how much of a shorter draft is verified
    one_prompt = "›" if d.thresholds.get("prompt") else ""  # one prompt's own switch, not the class's
    return str(d.decision_id), one_prompt + change + ("" if d.applied else "?"), d.prompt_class


def render_decision(d: Decision, cited: list) -> str:
    """What a selected decision was based on: its rule, inputs, thresholds and cited rounds."""
    inputs = ", ".join(f"{k} {v:.4g}" for k, v in d.inputs.items())
    by_k: dict[int, list] = {}
    for ev in cited:
        by_k.setdefault(ev.draft_len, []).append(ev.round_id)
    spans = "; ".join(f"k={k}: {len(ids)} rounds ({ids[0]}…{ids[-1]})" for k, ids in sorted(by_k.items()))
    applied = "" if d.applied else " (advised, not applied)"
    if d.thresholds.get("prompt"):
        applied += f" for one prompt only ({d.reason})"
    t = d.thresholds
    if t.get("gate"):
        steps = " ".join(f"{t[f'steps_{j}']:.2f}" for j in range(len(t)) if f"steps_{j}" in t)
        rule = f"{d.reason}\nthresholds: min_gain {t['min_gain']}; a round's cost, plain steps, by draft: {steps}"
    else:
        rule = f"thresholds: min_gain {t['min_gain']}, hysteresis {t.get('hysteresis', 0.0)}"
    return (f"decision {d.decision_id} [{d.prompt_class}] {decision_row(d)[1]}{applied} by {d.rule_key} "
            f"(policy line {d.rule_line})\ninputs: {inputs}\n{rule}\ncited {len(d.round_ids)} rounds, "
            f"{len(cited)} held: {spans}")


def policy_notice(state: ViewState, reload_fresh: bool) -> tuple[str, Text] | None:
    """What the last policy edit came to, as (title, body), the body whole (the notice wraps it): a
    refused edit's reason while it stands, else a reload just taken (`reload_fresh`); None otherwise."""
    if state.refused is not None:
        reason = " ".join(state.refused.error.splitlines()) or "no reason given"
        return "policy edit refused", Text("the previous policy stays in force: ", style="bold").append(reason)
    reload = state.reloaded
    if not reload_fresh or reload is None:
        return None
    if not reload.classes:  # an older log says neither what changed nor when it took effect
        return "policy reloaded", Text(f"policy {reload.sha256[:8]} in force")
    changed = ", ".join(reload.changed) or "nothing the classes run by"
    return "policy reloaded", Text(f"changed {changed}; in force from each class's next prompt")


def status_line(state: ViewState, source: str, alerts: list[str], lead: str = "", tail: str = "",
                width: int = 0) -> Text:
    """The title bar, most important first so a narrow terminal cuts the least: the replay's
    position, alerts, the session (short id, profile, host), its drafter and mode ("policy" or
    the k in force), when and how it ended, rounds; then `tail` where the width leaves room."""
    parts: list[tuple[str, str]] = []
    if lead:
        parts.append((lead, "bold"))
    parts += [(alert, "bold red") for alert in alerts]
    parts.append((state.session_label() or source, "bold"))
    mode = state.mode_label()
    if state.session is not None:
        mode = f"{state.session.drafter} {mode}".strip()
    if mode:
        parts.append((mode, ""))
    if state.finished:  # before the round count: on a narrow screen, that it ended matters more
        reason = state.finished.reason
        at = "ended at " + time.strftime("%H:%M:%S", time.localtime(state.finished.t))
        parts.append((at, "bold") if reason == "done" else (f"{at} ({reason})", "bold yellow"))
    parts.append((f"{state.rounds_seen} rounds", ""))
    text = Text(no_wrap=True)
    for i, (part, style) in enumerate(parts):
        text.append(" · " if i else "").append(part, style=style)
    if tail and (not width or len(text) + 3 + len(tail) <= width):
        text.append(" · ").append(tail, style="dim")
    if width and len(text) > width:
        text.truncate(width - 1)
        text.append("…")
    return text
