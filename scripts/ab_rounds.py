#!/usr/bin/env python
"""Does a change cost each round something? Two commits' `specmon run --headless` on the same host and
venv, run after run in turn (the order swapped every pair), each run's mean drafting-round ms (draft +
verify + overhead of every k > 0 round), plain tok/s and the mean overhead of every round (specmon's own
work beside the model's: bookkeeping, emitting the event, the policy) read from its own log; per pair the
ratio B / A, and over the pairs their mean with a 95% t-interval. A host whose speed drifts over minutes moves both
runs of a pair alike; more pairs narrow the interval.

    .venv/bin/python scripts/ab_rounds.py a31209c HEAD --pairs 6

Each commit is checked out in a git worktree under a temporary folder and run from there with this venv
(its own `specmon` is imported: the working directory comes first on sys.path); this checkout reads
the logs, so compare commits no newer than it. Figures are printed, never asserted."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from specmon.events.log import read_log

ROOT = Path(__file__).resolve().parent.parent
# Student's t, two-sided 95%, by degrees of freedom; past 30, 30's (a little wide, never narrow)
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23, 12: 2.18,
       15: 2.13, 20: 2.09, 30: 2.04}  # fmt: skip


def figures(log: Path) -> tuple[float, float, float]:
    """(mean ms of a drafting round, plain tok/s, mean overhead ms of a round) of one `run --headless` log."""
    spec_ms, overhead_ms, tokens, plain_ms = [], [], 0, 0.0
    for ev in read_log(log):
        kind = type(ev).__name__
        if kind == "RoundVerified":
            overhead_ms.append(ev.overhead_ms)
        if kind == "RoundVerified" and ev.draft_len:
            spec_ms.append(ev.draft_ms + ev.verify_ms + ev.overhead_ms)
        elif kind == "PromptFinished" and not ev.draft_len:
            tokens += len(ev.generated)
            plain_ms += ev.decode_ms
    if not spec_ms or not plain_ms:
        sys.exit(f"ab_rounds: {log} has no {'drafting rounds' if not spec_ms else 'plain prompts'} to compare")
    return statistics.mean(spec_ms), tokens / plain_ms * 1e3, statistics.mean(overhead_ms)


def run(tree: Path, log: Path, extra: list[str]) -> tuple[float, float, float]:
    argv = [sys.executable, "-m", "specmon.cli", "run", "--headless", "--log", str(log), *extra]
    done = subprocess.run(argv, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        sys.exit(f"ab_rounds: `specmon run` at {tree.name} failed: {done.stderr.strip()[-400:]}")
    return figures(log)


def interval(ratios: list[float]) -> str:
    mean = statistics.mean(ratios)
    if len(ratios) < 2:
        return f"{mean:.3f}"
    t = T95[max(df for df in T95 if df <= len(ratios) - 1)]
    half = t * statistics.stdev(ratios) / len(ratios) ** 0.5
    return f"{mean:.3f} [{mean - half:.3f}, {mean + half:.3f}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", help="the commit to compare against")
    parser.add_argument("b", help="the commit under test")
    parser.add_argument("--pairs", type=int, default=4, help="runs of each, in turn (default 4)")
    parser.add_argument("--max-new-tokens", default="32", help="per prompt (default 32)")
    args = parser.parse_args()
    extra = ["--max-new-tokens", args.max_new_tokens]
    with tempfile.TemporaryDirectory(prefix="ab-rounds-") as tmp:
        trees: dict[str, Path] = {}
        try:
            for name in (args.a, args.b):
                tree = Path(tmp) / name.replace("/", "_")
                added = subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(tree), name])
                if added.returncode:
                    sys.exit(f"ab_rounds: cannot check out {name}")
                trees[name] = tree
            ratios: dict[str, list[float]] = {"round ms": [], "plain tok/s": [], "overhead ms": []}
            for i in range(args.pairs):
                order = [args.a, args.b] if i % 2 == 0 else [args.b, args.a]
                got = {name: run(trees[name], Path(tmp) / f"{trees[name].name}-{i}.specmon", extra) for name in order}
                (ms_a, tok_a, over_a), (ms_b, tok_b, over_b) = got[args.a], got[args.b]
                ratios["round ms"].append(ms_b / ms_a)
                ratios["plain tok/s"].append(tok_b / tok_a)
                ratios["overhead ms"].append(over_b / over_a if over_a else 1.0)  # none in either: no change
                print(
                    f"pair {i + 1}: round ms {ms_a:.2f} -> {ms_b:.2f} ({ms_b / ms_a:.3f}), "
                    f"plain tok/s {tok_a:.2f} -> {tok_b:.2f} ({tok_b / tok_a:.3f}), "
                    f"overhead ms {over_a:.3f} -> {over_b:.3f} ({ratios['overhead ms'][-1]:.3f})",
                    flush=True,
                )
            for what, values in ratios.items():
                print(f"{args.b} / {args.a}, {what}: {interval(values)} over {len(values)} pairs")
        finally:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
