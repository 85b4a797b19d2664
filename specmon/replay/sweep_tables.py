"""The tables `specmon sweep` prints (rich, in 80 columns), from the rows replay.sweep_report derives
from a sweep's log: acceptance and speed per cell against the prediction, and break-even per k."""

from __future__ import annotations

from pathlib import Path

from rich.console import Group
from rich.markup import escape
from rich.table import Table

from specmon.metrics.contention import MARK_SHARE
from specmon.metrics.format import fmt
from specmon.metrics.predict import MIN_ROUNDS, TOLERANCE
from specmon.replay.sweep_report import CellRow, sampling_label
from specmon.tables import VERDICT_MARKS, Note, compact_table


def results_table(rows: list[CellRow], log_name: str) -> Group:
    """Per cell, in 80 columns: acceptance, then speed against the prediction, then the flagged cells."""
    acceptance = _table(
        escape(f"sweep {log_name}: acceptance per cell"),
        ("class", "drafter", "sampling", "k", "rounds", "empty", "rate", "mean", "α̂", "output"),
    )
    speed = _table(
        "measured speedup against predicted (gap = measured/predicted - 1)",
        ("class", "drafter", "sampling", "k", "draft", "verify", "tok/s", "speedup", "pred", "gap"),
    )
    flagged = []
    for r in rows:
        run, key = r.run, r.key
        cell = (escape(key.prompt_class), escape(key.drafter), sampling_label(key.sampling), str(key.draft_len))
        verdicts = ", ".join(f"{n} {v}" for v, n in sorted(run.verdicts.items())) or "-"
        acceptance.add_row(
            *cell,
            str(run.rounds),
            str(run.empty_rounds),
            fmt(run.acceptance_rate),
            fmt(run.mean_accepted_len),
            fmt(run.alpha_hat),
            verdicts,
        )
        gap = fmt(r.gap * 100 if r.gap is not None else None, "{:+.0f}%")
        speed.add_row(
            *cell,
            fmt(run.mean_ms(run.draft_ms)),
            fmt(run.mean_ms(run.verify_ms), "{:.1f}"),
            fmt(run.tok_per_s, "{:.1f}"),
            fmt(r.speedup, "{:.2f}×") + _busy(r),
            fmt(r.predicted, "{:.2f}×"),
            f"[yellow]{gap}[/]" if r.flag.startswith("off") else gap,
        )
        if r.flag:
            flagged.append(
                Note(
                    f"{key.prompt_class} {key.drafter} {sampling_label(key.sampling)} k={key.draft_len}: "
                    f"{r.flag} ({run.rounds} rounds)",
                    "yellow" if r.flag.startswith("off") else "dim",
                    (r.flag, f"({run.rounds} rounds)"),
                )
            )
    legend = Note(
        f"empty: rounds that proposed nothing; draft, verify: ms per round; pred: the speedup the cell's "
        f"proposal mix, per-position acceptance and the sweep's verify cost per proposal length predict; "
        f"flagged below: cells under {MIN_ROUNDS} rounds, or more than {TOLERANCE:.0%} off; {BUSY_LEGEND}",
        "dim",
    )
    return Group(acceptance, speed, legend, *flagged)


BUSY_LEGEND = f"~ busy host: {MARK_SHARE:.0%}+ of a cell's rounds and its plain cell's disturbed"


def _busy(row: CellRow) -> str:
    """The mark run and log info put beside a speedup measured on a busy host, or ''."""
    return VERDICT_MARKS["busy host"] if row.host.busy else ""


def _table(title: str, columns: tuple[str, ...]) -> Table:
    return compact_table(title, columns, left=("class", "drafter", "sampling", "output"))


def break_even_table(rows: list[CellRow]) -> Group:
    """Per class, drafter and k (greedy cells): the smallest acceptance at which a drafting round
    pays, from the costs of the rounds that drafted, beside the acceptance they measured; where
    the cell's measured speedup says otherwise, that speedup beside the verdict and a line why."""
    table = _table(
        "break-even acceptance per k, on the rounds that drafted",
        ("class", "drafter", "k", "drafted", "break-even α", "measured", "eq. 1 pays"),
    )
    notes = []
    for r in rows:
        if not r.key.draft_len or not r.key.sampling.greedy:
            continue
        run, need, pays = r.run, r.break_even, _pays(r)
        if need == 0.0:  # eq. 1's α = 0 already pays (pays says yes from the same figure): 0.00 would hide why
            shown = "any"
            notes.append(_any_acceptance(r))
        else:
            shown = fmt(need)
        if _measured_otherwise(r, pays):
            notes.append(_why_measured_otherwise(r, pays))
            pays += f", ran {r.speedup:.2f}×{_busy(r)}"
        table.add_row(
            escape(r.key.prompt_class),
            escape(r.key.drafter),
            str(r.key.draft_len),
            f"{run.drafted_rounds}/{run.rounds}",
            shown + (_busy(r) if need is not None else ""),
            fmt(run.acceptance_rate),
            pays,
        )
    legend = Note(
        "break-even: eq. 1 with every round proposing k, priced on the drafting rounds' draft and verify "
        "time against a plain step's (rounds the host disturbed left out); measured: their acceptance "
        "(accepted/proposed); eq. 1 pays: that prediction for a drafting round at that acceptance; ran N×: "
        "the cell's measured speedup (all its rounds, wall time), shown where it says otherwise, with a "
        "line below saying why; rounds that drafted nothing cost about a plain step and gain nothing, so a "
        "cell with few drafting rounds stays near plain whatever its rate; never: even full acceptance "
        f"does not pay; any: even zero acceptance pays; {BUSY_LEGEND}",
        "dim",
    )
    return Group(table, legend, *notes)


def _pays(r: CellRow) -> str:
    """Eq. 1's verdict on a drafting round at the measured acceptance: yes, no, never, or '-'."""
    rate, need = r.run.acceptance_rate, r.break_even
    if rate is None or r.c is None:
        return "-"
    return "never" if need is None else "yes" if rate >= need else "no"


def _measured_otherwise(r: CellRow, pays: str) -> bool:
    """The cell ran slower than plain where eq. 1 says it pays, or faster where it says it does not."""
    shown = 1.0 if r.speedup is None else round(r.speedup, 2)  # as printed: never `yes, ran 1.00×`
    return shown < 1.0 if pays == "yes" else shown > 1.0 and pays in ("no", "never")


def _why_measured_otherwise(r: CellRow, pays: str) -> Note:
    """Why eq. 1's verdict and the measured speedup part: the causes this cell shows."""
    run = r.run
    causes = []
    if run.drafted_rounds * 2 < run.rounds:
        causes.append(
            f"only {run.drafted_rounds} of {run.rounds} rounds drafted, the rest plain steps with a lookup, "
            "which eq. 1 leaves out"
        )
    if r.host.busy:
        causes.append("a busy host (~) slowed the cell's rounds and its plain cell's unequally")
    if not causes:
        causes.append("what eq. 1 leaves out (overhead, proposals shorter than k; pred above prices them) or noise")
    verdict = {"yes": "pays", "no": "does not pay", "never": "never pays"}[pays]
    ran = f"{r.speedup:.2f}× plain"
    return Note(
        f"{r.key.prompt_class} {r.key.drafter} k={r.key.draft_len}: eq. 1 says a drafting round {verdict} at "
        f"{fmt(run.acceptance_rate)} acceptance, yet the cell ran {ran}: {'; '.join(causes)}",
        "yellow",
        (ran, f"{run.drafted_rounds} of {run.rounds} rounds", "busy host (~)"),
    )


def _any_acceptance(r: CellRow) -> Note:
    """Why a break-even is any acceptance, and why that is suspect."""
    k = r.key.draft_len
    cost, verify = f"{r.drafting_cost:.2f} plain steps", f"(verify {r.v:.2f});"
    return Note(
        f"{r.key.prompt_class} {r.key.drafter} k={k}: break-even at any acceptance: a drafting round cost "
        f"{cost} {verify} a verify pass of up to {k + 1} tokens under one plain step means the plain steps "
        "were slowed (a busy host) or timer noise",
        "yellow",
        (cost, verify, "one plain step"),
    )


def paths_note(log: Path, plots: list[Path]) -> Note:
    """Where the sweep's log and plots are, a label kept beside its first path."""
    shown = ", ".join(map(str, plots))
    return Note(f"log: {log}  plots: {shown}", whole=(f"log: {log}", f"plots: {plots[0]}" if plots else ""))
