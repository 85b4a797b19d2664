"""Plain-terminal tables of the per-class summary (rich, not Textual).

Class names, prompt ids and paths come from users' files: they are escaped, so a class named
`[/]` prints as itself instead of being read as Rich markup."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from specmon.metrics.format import fmt as _num


def _verdict(row: dict) -> str:
    if row["greedy_identical"] is True:
        return "[green]identical[/]"
    verdicts = row["equivalence"]
    if not verdicts or row["draft_len"] == 0:
        return "-"
    if "sampled" in verdicts:
        return "sampled"
    parts = [f"{n} {v}" for v, n in sorted(verdicts.items())]
    colour = "red" if "diverged" in verdicts else "yellow"
    return f"[{colour}]{', '.join(parts)}[/]"


def class_table(summary: dict, title: str) -> Table:
    table = Table(title=escape(title), title_justify="left", header_style="bold")
    table.caption = ("rate = accepted/proposed; mean = accepted/round; a_i = per-position acceptance; "
                     "ms per round; speedup = tok/s over plain decoding's, same class, same run")
    for name in ("class", "k", "rounds", "proposed", "accepted", "rate", "mean",
                 "a_i", "draft ms", "verify ms", "tok/s", "plain tok/s", "speedup", "output"):
        table.add_column(name, justify="left" if name in ("class", "a_i", "output") else "right")
    for name, row in summary["classes"].items():
        positions = " ".join(f"{a:.2f}" for a in row["per_position_acceptance"]) or "-"
        speedup = row["speedup"]
        colour = "green" if speedup and speedup >= 1.02 else "red" if speedup and speedup < 0.98 else "white"
        table.add_row(
            escape(name), str(row["draft_len"]), str(row["rounds"]), str(row["proposed"]), str(row["accepted"]),
            _num(row["acceptance_rate"]), _num(row["mean_accepted_len"]), positions,
            _num(row["draft_ms"]), _num(row["verify_ms"]), _num(row["tok_per_s"], "{:.1f}"),
            _num(row["baseline_tok_per_s"], "{:.1f}"), f"[{colour}]{_num(speedup, '{:.2f}×')}[/]", _verdict(row),
        )
    return table


def divergence_lines(events) -> list[str]:
    """One line per prompt whose greedy output left plain decoding's, with the logit margin there."""
    lines = []
    for ev in events:
        eq = getattr(ev, "equivalence", None)
        if eq is None or eq.verdict not in ("near-tie", "diverged"):
            continue
        why = f"below the near-tie margin {eq.near_tie_margin:g}" if eq.verdict == "near-tie" \
            else f"not a near-tie (margin >= {eq.near_tie_margin:g}): a real mismatch"
        lines.append(f"{ev.prompt_id} (k={ev.draft_len}): {eq.verdict} at generated token {eq.first_divergence}, "
                     f"plain top-1 minus top-2 logit {_num(eq.margin, '{:.4g}')}, {why}")
    return lines
