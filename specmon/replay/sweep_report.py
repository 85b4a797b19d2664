"""Sweep results per cell: measured figures beside the speedup their measured proposal mix,
acceptance and verify costs predict, break-even acceptance (eq. 1), and a suggested policy
written through tomlkit."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import tomlkit

from specmon.events.schema import RoundVerified
from specmon.metrics import rates
from specmon.metrics.predict import (MIN_ROUNDS, TOLERANCE, break_even_alpha, mix_round_ms, mix_tokens_per_round,
                                     verify_cost_by_len)
from specmon.metrics.stats import CellKey, RunStats, cell_stats
from specmon.policy.edit import replace_atomically
from specmon.policy.schema import parse_policy


@dataclass
class CellRow:
    key: CellKey
    run: RunStats
    speedup: float | None
    c: float | None  # one draft step / one target step (eq. 1's cost, for break-even)
    v: float | None  # verify k+1 positions / one target step
    predicted: float | None  # from the measured proposal mix and verify cost per proposal length
    break_even: float | None

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
    rows = []
    for key, run in sorted(cells.items(), key=lambda kv: (kv[0].prompt_class, kv[0].drafter, kv[0].draft_len)):
        base = cells.get(CellKey(key.prompt_class, "none", key.sampling, 0))
        rows.append(_row(key, run, base, v))
    return rows


def _row(key: CellKey, run: RunStats, base: RunStats | None, v_by_len: dict[int, float]) -> CellRow:
    if base is None or not base.rounds or not run.rounds or not base.goodput:
        return CellRow(key, run, None, None, None, None, None)
    step = base.verify_ms / base.rounds
    speedup = rates.speedup(run.goodput, base.goodput)
    if key.draft_len == 0:
        return CellRow(key, run, speedup, None, 1.0, 1.0, None)
    c = (run.draft_ms / run.rounds / key.draft_len) / step
    v = (run.verify_ms / run.rounds) / step
    return CellRow(key, run, speedup, c, v, _predicted(run, base, step, v_by_len),
                   break_even_alpha(key.draft_len, c, v))


def _predicted(run: RunStats, base: RunStats, step: float, v_by_len: dict[int, float]) -> float | None:
    """Goodput the cell's proposal mix, acceptance and the sweep's verify costs predict, over plain's."""
    over = run.proposed_gt + [0]
    length_share = {0: (run.rounds - (over[0] if run.proposed_gt else 0)) / run.rounds}
    length_share.update({i + 1: (over[i] - over[i + 1]) / run.rounds for i in range(len(run.proposed_gt))})
    tokens = mix_tokens_per_round([n / run.rounds for n in run.proposed_gt], run.per_position)
    round_ms = mix_round_ms({n: share for n, share in length_share.items() if share}, v_by_len, step,
                            run.draft_ms / run.rounds, run.overhead_ms / run.rounds)
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


def sweep_plots(rows: list[CellRow], out: Path) -> list[Path]:
    """goodput by k per class and drafter, and measured against predicted speedup."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    series: dict[tuple, list[CellRow]] = {}
    for r in rows:
        series.setdefault((r.key.prompt_class, r.key.drafter, r.key.sampling.temperature), []).append(r)
    for (cls, drafter, temp), cells in series.items():
        plain = [r for r in rows if r.key.prompt_class == cls and r.key.draft_len == 0
                 and r.key.sampling.temperature == temp]
        points = sorted(plain + cells, key=lambda r: r.key.draft_len) if drafter != "none" else []
        if points:
            ax.plot([p.key.draft_len for p in points], [p.run.tok_per_s or 0 for p in points], marker="o",
                    label=f"{cls} {drafter} T={temp:g}")
    ax.set(title="goodput by draft length (k = 0 is plain)", xlabel="k", ylabel="tokens / s")
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "sweep_goodput.png")
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(5, 5), dpi=100)
    pairs = [(r.predicted, r.speedup) for r in rows if r.predicted and r.speedup and r.key.draft_len]
    ax.scatter([p for p, _ in pairs], [m for _, m in pairs], s=12)
    top = max([1.5] + [max(p, m) for p, m in pairs])
    ax.plot([0, top], [0, top], color="grey", linewidth=0.8)
    ax.set(title="measured vs predicted speedup", xlabel="predicted", ylabel="measured")
    fig.tight_layout()
    fig.savefig(out / "sweep_predicted.png")
    plt.close(fig)
    return [out / "sweep_goodput.png", out / "sweep_predicted.png"]
