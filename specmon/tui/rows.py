"""The class and decision tables' rows and the title line, as pure functions of ViewState."""

from __future__ import annotations

import time

from rich.text import Text

from specmon.events.schema import Decision
from specmon.metrics.contention import clock
from specmon.metrics.format import MISSING, count, fmt
from specmon.tui.panes import verdict_style
from specmon.tui.state import ViewState

# (key, header, width, justify): widths fit 80 columns with no cell padding.
CLASS_COLUMNS = [
    ("class", "class", 11, "left"),
    ("k", "k", 2, "right"),
    ("rounds", "rounds", 7, "right"),
    ("empty", "empty", 6, "right"),
    ("accept", "acc", 5, "right"),
    ("mean len", "len", 5, "right"),
    ("speedup", "speedup", 8, "right"),
    ("spec", " spec", 13, "left"),
]
DECISION_COLUMNS = [("id", 3), ("to", 6), ("class", 12)]  # cut at the pane's edge when narrower
VERDICT_MARKS = {"faster": "", "slower": "", "not yet known": "?", "noise": "!", "busy host": "~"}


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
        rows.append(
            (
                name,
                str(k) if k else "-",
                str(run.rounds if run else 0),
                str(run.empty_rounds if run else 0),
                fmt(run.acceptance_rate if run else None),
                fmt(run.mean_accepted_len if run else None),
                speedup,
                " " + on_off(state, name),
            )
        )
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


NO_DRAFT = "vs no-draft"  # an older rule's plain side: k = 0 rounds and rounds that drafted nothing


def policy_figure(state: ViewState, width: int = 80) -> str:
    """The figure the policy last decided the current class on, as its decision recorded it: the
    goodput ratio, its 95% interval over prompts and the rounds on each side (k / base). Where its
    plain side held rounds that drafted nothing (policy.silent_plain), it says so: the speed pane's
    plain is k = 0 rounds only. Parts are dropped from the end to fit `width`."""
    decision = next(
        (
            d
            for d in reversed(state.decisions)
            if d.prompt_class == state.current_class and not d.thresholds.get("prompt") and not d.match_to
        ),
        None,
    )  # a min_match decision's ratio is its short matches', not the class's
    if decision is None or "ratio" not in decision.inputs:
        return ""
    i = decision.inputs
    parts = [f"d{decision.decision_id} {i['ratio']:.2f}×"]
    if decision.thresholds.get("silent_plain"):
        parts.append(NO_DRAFT)
    if i.get("high"):  # decided on an interval (0.0 high: too few prompts for one)
        parts.append(f"[{i['low']:.2f}–{i['high']:.2f}]")
    if "rounds_spec" in i:
        parts.append(f"n{i['rounds_spec']:.0f}/{i['rounds_base']:.0f}")
    while len(parts) > 1 and len(" ".join(parts)) > width:
        parts.pop()
    return " ".join(parts)


def decision_row(d: Decision) -> tuple[str, str, str]:
    if d.route is not None:  # a proxy's: where the class's requests go
        change = f"→{d.route.side_to}"
    elif d.speculate_from != d.speculate_to:
        change = f"on k{d.k_to}" if d.speculate_to else "off"
    elif d.k_from != d.k_to:
        change = f"k{d.k_from}→{d.k_to}"
    elif d.match_from != d.match_to:  # drafts from a longer (shorter) match; an older log: the drafter's min_match
        change = f"m{d.match_from}→{d.match_to}"
    else:
        change = "cuts"  # only how much of a shorter draft is verified
    one_prompt = "›" if d.thresholds.get("prompt") else ""  # one prompt's own switch, not the class's
    return str(d.decision_id), one_prompt + change + ("" if d.applied else "?"), d.prompt_class


def decision_inputs(d: Decision) -> str:
    """A decision's inputs in words: goodput in tokens/s (logged per ms), the ratio named by its
    sides; the rest as logged."""
    i, words, done = d.inputs, [], set()
    plain = "plain (k=0 and rounds that drafted nothing)" if d.thresholds.get("silent_plain") else "plain"
    for key, value in i.items():
        if key.startswith("goodput_k"):
            k = key[len("goodput_k") :]
            words.append(f"{plain if k == '0' else 'k=' + k} {value * 1e3:.1f} tok/s")
            done.add(key)
    if "ratio" in i:
        interval = f" [{i['low']:.2f}–{i['high']:.2f}]" if i.get("high") else ""
        words.append(f"ratio {i['ratio']:.2f}×{interval}")
        done |= {"ratio", "low", "high"}
    if "rounds_spec" in i:
        words.append(f"rounds {i['rounds_spec']:.0f} vs {i['rounds_base']:.0f}")
        done |= {"rounds_spec", "rounds_base"}
    if "prompts_spec" in i:
        words.append(f"prompts {i['prompts_spec']:.0f} vs {i['prompts_base']:.0f}")
        done |= {"prompts_spec", "prompts_base", "spec_k", "base_k"}
    words += [f"{key} {value:.4g}" for key, value in i.items() if key not in done]
    return ", ".join(words)


def render_decision(d: Decision, cited: list) -> str:
    """What a selected decision was based on: its rule, inputs, thresholds and cited rounds."""
    inputs = decision_inputs(d)
    by_k: dict[int, list] = {}
    for ev in cited:
        by_k.setdefault(ev.draft_len, []).append(ev.round_id)
    spans = "; ".join(f"k={k}: {count(len(ids), 'round')} ({ids[0]}…{ids[-1]})" for k, ids in sorted(by_k.items()))
    applied = "" if d.applied else " (advised, not applied)"
    if d.thresholds.get("prompt"):
        applied += f" for one prompt only ({d.reason})"
    t = d.thresholds
    if t.get("gate"):
        steps = " ".join(f"{t[f'steps_{j}']:.2f}" for j in range(len(t)) if f"steps_{j}" in t)
        rule = f"{d.reason}\nthresholds: min_gain {t['min_gain']}; a round's cost, plain steps, by draft: {steps}"
    else:
        rule = f"thresholds: min_gain {t['min_gain']}, hysteresis {t.get('hysteresis', 0.0)}"
    return (
        f"decision {d.decision_id} [{d.prompt_class}] {decision_row(d)[1]}{applied} by {d.rule_key} "
        f"(policy line {d.rule_line})\ninputs: {inputs}\n{rule}\ncited {count(len(d.round_ids), 'round')}, "
        f"{len(cited)} held: {spans}"
    )


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


def host_label(state: ViewState) -> str:
    """While recent rounds are disturbed: how many; once the host calmed, that and when it was busy."""
    if state.host_now_busy:
        return f"host busy: {sum(state.host_recent)}/{len(state.host_recent)} rounds"
    if state.host_busy:
        return f"host was busy {clock(state.host_busy[0])}-{clock(state.host_busy[1])}"
    return ""


def status_line(
    state: ViewState, source: str, alerts: list[str], lead: str = "", tail: str = "", width: int = 0
) -> Text:
    """The title bar, most important first so a narrow terminal cuts the least: the replay's
    position, alerts, the session (short id, profile, host), its drafter and mode ("policy" or
    the k in force), when and how it ended, rounds; then `tail` where the width leaves room."""
    parts: list[tuple[str, str]] = []
    if lead:
        parts.append((lead, "bold"))
    parts += [(alert, "bold red") for alert in alerts]
    host = host_label(state)
    if host:
        parts.append((host, "bold yellow"))
    parts.append((state.session_label() or source, "bold"))
    mode = state.mode_label()
    if state.session is not None:
        mode = f"{state.drafter_label()} {mode}".strip()
    if mode:
        parts.append((mode, ""))
    if state.finished:  # before the round count: on a narrow screen, that it ended matters more
        reason = state.finished.reason
        at = "ended at " + time.strftime("%H:%M:%S", time.localtime(state.finished.t))
        parts.append((at, "bold") if reason == "done" else (f"{at} ({reason})", "bold yellow"))
    parts.append((count(state.rounds_seen, "round"), ""))
    text = Text(no_wrap=True)
    for i, (part, style) in enumerate(parts):
        text.append(" · " if i else "").append(part, style=style)
    if tail and (not width or len(text) + 3 + len(tail) <= width):
        text.append(" · ").append(tail, style="dim")
    if width and len(text) > width:
        text.truncate(width - 1)
        text.append("…")
    return text
