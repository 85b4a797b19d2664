"""How a plain step's time follows the host's CPU contention: the measurement behind
specmon.telemetry.host.CONTENTION, the stall share from which a round counts as disturbed.

Plain steps are timed with 0, 1 and 2 busy-loop hogs beside them (interleaved, `--reps` times),
each with the host's stall over it (StallClock: PSI where the kernel has it). Steps are then binned
by stall share, and each bin says how much slower than the quiet median its steps ran.

    .venv/bin/python scripts/bench_contention.py --profile smollm2-llamacpp --steps 400
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from specmon.backends.loader import load_pair
from specmon.backends.profiles import DrafterSpec, load_profile
from specmon.telemetry.host import CONTENTION, StallClock, stall_ms

BINS = (0.0, 0.01, 0.05, 0.10, 0.20, 0.50, 0.90, 1.01)
SLOW = 1.15  # a step this much slower than the quiet median is one the host disturbed


def time_steps(target, clock: StallClock, steps: int) -> list[tuple[float, float]]:
    """(ms, stall share) of `steps` plain steps after 128 tokens of context."""
    context = [(100 + i) % target.vocab_size for i in range(128)]
    target.prefill(context[:-1])
    base, rows = len(context) - 1, []
    for _ in range(steps):
        before, start = clock.stall(), time.perf_counter()
        target.forward(context[-1:], base)
        target.truncate(base)
        ms = (time.perf_counter() - start) * 1e3
        lost = stall_ms(before, clock.stall())
        rows.append((ms, (lost or 0.0) / ms))
    return rows


def with_hogs(hogs: int, run):
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
    try:
        time.sleep(0.3)  # the hogs are running before the first step
        return run()
    finally:
        for p in procs:
            p.kill()
            p.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="smollm2-cpu")
    parser.add_argument("--steps", type=int, default=200, help="plain steps per condition (default 200)")
    parser.add_argument("--reps", type=int, default=3, help="rounds over the 0/1/2-hog conditions (default 3)")
    args = parser.parse_args()
    clock = StallClock()
    if clock.source is None:
        print("skipped: this host reports no CPU stall (no /proc/pressure/cpu, no /proc/stat)")
        return 0
    target = load_pair(load_profile(args.profile), DrafterSpec(kind="none")).target
    by_hogs: dict[int, list[tuple[float, float]]] = {0: [], 1: [], 2: []}
    for _ in range(args.reps):
        for hogs in by_hogs:
            by_hogs[hogs] += with_hogs(hogs, lambda: time_steps(target, clock, args.steps))
    quiet = statistics.median(ms for ms, share in by_hogs[0] if share < CONTENTION)
    print(f"{args.profile}: stall from {clock.source}; quiet median plain step {quiet:.2f} ms")
    for hogs, rows in by_hogs.items():
        print(
            f"  {hogs} hog(s): median step {statistics.median(ms for ms, _ in rows) / quiet:.2f}x quiet, "
            f"mean stall share {statistics.mean(s for _, s in rows):.2f}"
        )
    print(f"  stall share     steps  median step  share > {SLOW}x quiet")
    every = [row for rows in by_hogs.values() for row in rows]
    for low, high in zip(BINS, BINS[1:]):
        picked = [ms / quiet for ms, share in every if low <= share < high]
        if picked:
            print(
                f"  [{low:.2f}, {high:.2f})  {len(picked):6d}  {statistics.median(picked):10.2f}x  "
                f"{sum(x > SLOW for x in picked) / len(picked):.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
