"""Sweep results per cell: measured figures beside the speedup the measured α̂, c and v(k) predict,
break-even acceptance, and a suggested policy written through tomlkit."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import tomlkit

from specmon.metrics import rates
from specmon.metrics.predict import break_even_alpha, predicted_speedup
from specmon.metrics.stats import CellKey, RunStats, cell_stats
from specmon.policy.edit import replace_atomically
from specmon.policy.schema import parse_policy


@dataclass
class CellRow:
    key: CellKey
    run: RunStats
    speedup: float | None
    c: float | None  # one draft step / one target step
    v: float | None  # verify k+1 positions / one target step
    predicted: float | None
    break_even: float | None

    @property
    def gap(self) -> float | None:
        """measured / predicted - 1: where overhead (or empty drafts), not acceptance, decides."""
        return None if not self.predicted or self.speedup is None else self.speedup / self.predicted - 1


def cell_rows(events) -> list[CellRow]:
    cells = cell_stats(events)
    rows = []
    for key, run in sorted(cells.items(), key=lambda kv: (kv[0].prompt_class, kv[0].drafter, kv[0].draft_len)):
        base = cells.get(CellKey(key.prompt_class, "none", key.sampling, 0))
        rows.append(_row(key, run, base))
    return rows


def _row(key: CellKey, run: RunStats, base: RunStats | None) -> CellRow:
    if base is None or not base.rounds or not run.rounds or not base.goodput:
        return CellRow(key, run, None, None, None, None, None)
    step = base.verify_ms / base.rounds
    speedup = rates.speedup(run.goodput, base.goodput)
    if key.draft_len == 0:
        return CellRow(key, run, speedup, None, 1.0, 1.0, None)
    c = (run.draft_ms / run.rounds / key.draft_len) / step
    v = (run.verify_ms / run.rounds) / step
    alpha = run.alpha_hat
    predicted = predicted_speedup(alpha, key.draft_len, c, v) if alpha is not None else None
    return CellRow(key, run, speedup, c, v, predicted, break_even_alpha(key.draft_len, c, v))


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
