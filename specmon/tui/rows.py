"""The class and decision tables' rows and the title line, as pure functions of ViewState."""

from __future__ import annotations

from rich.text import Text

from specmon.events.schema import Decision
from specmon.metrics.contention import clock
from specmon.metrics.format import MISSING, count, fmt
from specmon.policy.route import cited_words
from specmon.tables import VERDICT_MARKS
from specmon.text import Part, cut, title
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
DECISION_COLUMNS = [("id", 3), ("to", 6), ("class", 12)]  # the class's is fitted to the pane (DecisionsTable)


def class_rows(state: ViewState) -> list[tuple[str, ...]]:
    """Per class at the k it shows: its figures (speedup ? while unknown, ! when noise), then on, or off and why."""
    return [(name, *_figures(state, name), " " + on_off(state, name)) for name in state.classes]


def _figures(state: ViewState, name: str) -> tuple[str, ...]:
    """A class's cells from k to the speedup; with no speculative round, k 0, its plain rounds and their tok/s."""
    k, run = state.shown_k(name), state.run_for(name)
    if not state.is_on(name) and not (run and run.rounds):  # nothing speculative to show: what it ran plainly
        base = state.classes[name].baseline
        return "0", str(base.rounds if base else 0), "-", "-", "-", tok_per_s(base.tok_per_s if base else None)
    estimate = state.speedup_estimate(name, k)
    ratio = estimate.ratio if estimate else None
    speedup = fmt(ratio, "{:.2f}×") + (VERDICT_MARKS.get(estimate.verdict, "") if ratio is not None else "")
    if run is None:
        return str(k), "0", "0", MISSING, MISSING, speedup
    return str(k), str(run.rounds), str(run.empty_rounds), fmt(run.acceptance_rate), fmt(run.mean_accepted_len), speedup


def tok_per_s(value: float | None) -> str:
    """Goodput in 7 characters, a blank short of the speedup column's 8: `7.8 t/s`, `153 t/s`, `12k t/s`."""
    if value is None:
        return MISSING
    if value < 9.95:
        return f"{value:.1f} t/s"
    return f"{value:.0f} t/s" if value < 999.5 else f"{value / 1e3:.0f}k t/s"


def styled_cells(state: ViewState, row: tuple[str, ...]) -> list[Text]:
    """A row's cells as the table shows them: justified, the speedup coloured by its verdict."""
    estimate = state.speedup_estimate(row[0], state.shown_k(row[0]))
    speedup, spec = row[-2:]
    styles = {  # plain goodput (t/s) is not a verdict
        "speedup": "dim" if speedup.endswith(" t/s") else verdict_style(estimate) if speedup != MISSING else "",
        "spec": "green" if spec.strip() == "on" else "dim",
    }
    return [
        Text(value, style=styles.get(key, ""), justify=just) for (key, _, _, just), value in zip(CLASS_COLUMNS, row)
    ]


def on_off(state: ViewState, name: str) -> str:
    if name in state.removed:
        return "removed"  # a reload took it out of the policy: no prompt runs by it any more
    if state.is_on(name):
        return "on"
    if name in state.off_by:
        return f"off d{state.off_by[name].decision_id}"
    if name in state.policy_off:
        return "off"  # the policy in force runs it plain
    # nothing switched it off: a fixed-k run decodes each prompt plainly first (or only, at k = 0)
    return "plain" if state.plain_done(name) else "plain first"


def policy_figure(state: ViewState, width: int = 80) -> str:
    """The speed pane's foot: the policy's last decision for the current class (`policy d12: k=8, match ≥2`)."""
    name = state.current_class
    if name in state.policy_off and name not in state.off_by:  # its file says off: no decision of it stands
        return cut("policy file: off", width)
    decision = next((d for d in reversed(state.decisions) if d.prompt_class == name and d.gate is not None), None)
    if decision is None:
        return ""
    what = "off" if not decision.speculate_to else f"k={decision.k_to}"
    if decision.speculate_to and decision.match_to:
        what += f", match ≥{decision.match_to}"
    return cut(f"policy d{decision.decision_id}: {what}", width)


def decision_row(d: Decision) -> tuple[str, str, str]:
    if d.route is not None:  # a proxy's: where the class's requests go
        change = f"→{d.route.side_to}"
    elif d.speculate_from != d.speculate_to:
        change = f"on k{d.k_to}" if d.speculate_to else "off"
    elif d.k_from != d.k_to:
        change = f"k{d.k_from}→{d.k_to}"
    elif d.match_from != d.match_to:  # drafts from a longer (shorter) match
        change = f"m{d.match_from}→{d.match_to}"
    else:
        change = "cuts"  # only how much of a shorter draft is verified
    return str(d.decision_id), change + ("" if d.applied else "?"), d.prompt_class


def render_decision(d: Decision, cited: list) -> str:
    """What a selected decision was based on: its rule, inputs, thresholds and cited rounds (or requests)."""
    applied = "" if d.applied else " (advised, not applied)"
    head = f"decision {d.decision_id} [{d.prompt_class}] {decision_row(d)[1]}{applied} by {d.rule_key} (policy line {d.rule_line})"
    if d.route is not None:
        return f"{head}\n{d.reason}\ncited {cited_words(d.request_ids, d.route.recalled)}"
    by_k: dict[int, list] = {}
    for ev in cited:
        by_k.setdefault(ev.draft_len, []).append(ev.round_id)
    spans = "; ".join(f"k={k}: {count(len(ids), 'round')} ({ids[0]}…{ids[-1]})" for k, ids in sorted(by_k.items()))
    g, inputs, rule = d.gate, "a rule specmon has retired: its figures are not shown", ""
    if g is not None:
        rates, steps = (" ".join(f"{x:.2f}" for x in figures) for figures in (g.rates, g.steps))
        inputs = f"acceptance by reach {rates}; the class's positions tried {' '.join(map(str, g.tried))}"
        rule = f"\nthresholds: min_gain {g.min_gain}; a round's cost, plain steps, by draft: {steps}"
    return (
        f"{head}\n{d.reason}\ninputs: {inputs}{rule}\n"
        f"cited {count(len(d.round_ids), 'round')}, {len(cited)} held: {spans}"
    )


def policy_notice(state: ViewState, reload_fresh: bool) -> tuple[str, Text] | None:
    """(title, body) of the last policy edit: a refused edit while it stands, else a fresh reload; or None."""
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


# what gives way, a step at a time, where the title is too narrow: the host's state to its marker first;
# last the marker itself, before the session's own short id is cut
SHORTEN_STEPS = ("tail", "host", "host", "ended", "session", "ended", "session", "host")


def status_line(
    state: ViewState, source: str, alerts: list[str], lead: str = "", tail: str = "", width: int = 0
) -> Text:
    """The title bar, most important first so a narrow terminal cuts the least (SHORTEN_STEPS); `tail` last."""
    parts = [Part("lead", [lead], "bold")] if lead else []
    parts += [Part(f"alert{i}", [alert], "bold red") for i, alert in enumerate(alerts)]
    host = []  # while recent rounds are disturbed, how many; once calm, when it was busy (an ended session's is calm)
    if state.host_now_busy and not state.finished:
        hit, recent = sum(state.host_recent), len(state.host_recent)
        host = [f"host busy: {hit}/{recent} rounds", f"busy {hit}/{recent}", "busy"]
    elif state.host_busy:
        span = f"{clock(state.host_busy[0])}-{clock(state.host_busy[1])}"
        host = [f"host was busy {span}", f"was busy {span}", "was busy"]
    if host:
        parts.append(Part("host", [*host, ""], "bold yellow"))
    label, mode = source, state.mode_label()
    if s := state.session:  # its short id (the random suffix), profile and host; its drafter before the mode
        hostname = s.host.get("hostname", "")
        label = f"{s.session_id.rsplit('-', 1)[-1]} {s.profile_name}" + (f"@{hostname}" if hostname else "")
        mode = f"{state.drafter_label()} {mode}".strip()
    profile = label.split("@", 1)[0]
    parts.append(Part("session", [label, profile, profile.split(" ", 1)[0]], "bold"))  # last, the short id alone
    if mode:
        parts.append(Part("mode", [mode]))
    if end := state.finished:  # before the round count: on a narrow screen, that it ended matters more
        at, reason = clock(end.t), "" if end.reason == "done" else f" ({end.reason})"  # a normal end says none
        ended = [f"ended at {at}{reason}", f"ended {at}{reason}", f"ended{reason}"]
        parts.append(Part("ended", ended, "bold yellow" if reason else "bold"))
    parts.append(Part("rounds", [count(state.rounds_seen, "round")]))
    if tail:
        parts.append(Part("tail", [tail, ""], "dim"))
    return title(parts, SHORTEN_STEPS, width or None)
