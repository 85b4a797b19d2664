#!/usr/bin/env python
"""Cost of one target pass over T = 1..9 positions (a round at k = T - 1 verifies T), median of
--reps, on the embedded model. On a CPU it need not grow smoothly with T: matrix kernels favour
some row counts, which is why the policy probes every k in a class's range, not just neighbours.

    python scripts/bench_verify_cost.py --context 300 --reps 15
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from specmon.backends.loader import load_pair
from specmon.backends.profiles import DrafterSpec, load_profile


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="smollm2-cpu")
    parser.add_argument("--context", type=int, default=300, help="tokens already in the cache")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--max-positions", type=int, default=9)
    args = parser.parse_args()
    target = load_pair(load_profile(args.profile), DrafterSpec(kind="none")).target
    context = [100 + i % 1000 for i in range(args.context)]
    target.prefill(context[:-1])
    medians = {}
    for positions in range(1, args.max_positions + 1):
        times = []
        for _ in range(args.reps):
            start = time.perf_counter()
            target.forward(context[-1:] + [5] * (positions - 1), len(context) - 1)
            times.append(time.perf_counter() - start)
        medians[positions] = statistics.median(times) * 1e3
    one = medians[1]
    print("T (k = T-1)  verify ms  v(k) = ms / one-position ms")
    for positions, ms in medians.items():
        print(f"{positions:>2} (k={positions - 1})     {ms:7.1f}    {ms / one:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
