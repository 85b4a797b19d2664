#!/usr/bin/env python
"""Cost of one target pass over T = 1..9 positions (a round at k = T - 1 verifies T), relative to
one position, with the plain fp32 kernels and with weights packed for --packed-rows rows (the
profile key packed_rows), interleaved rep by rep on one machine state. On a CPU, MKL's fp32 gemm
reads the weights once per 3 rows, so without packing a 4-position verify costs about twice a
plain step; the packed pass reads them once for all rows.

    python scripts/bench_verify_cost.py --context 300 --reps 15
    python scripts/bench_verify_cost.py --profile smollm2-llamacpp   # llama.cpp's kernels alone
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import msgspec

from specmon.backends.loader import load_pair
from specmon.backends.profiles import DrafterSpec, load_profile


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="smollm2-cpu")
    parser.add_argument("--context", type=int, default=300, help="tokens already in the cache")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--max-positions", type=int, default=9)
    parser.add_argument("--packed-rows", type=int, default=9, help="rows the packed weights are laid out for")
    args = parser.parse_args()
    profile = load_profile(args.profile)
    layouts = (("plain", 0), ("packed", args.packed_rows)) if profile.backend == "torch" else ((profile.backend, 0),)
    targets = {name: load_pair(msgspec.structs.replace(profile, packed_rows=rows), DrafterSpec(kind="none")).target
               for name, rows in layouts}
    packed = targets["packed"].model if "packed" in targets else None
    if packed is not None and not packed.packed_rows:
        print("this torch or profile cannot pack weights (MKL, fp32 on the CPU); packed = plain", file=sys.stderr)
    elif packed is not None:
        print(f"packed: passes of {packed.pad_from}..{args.packed_rows} positions run as "
              f"{args.packed_rows} rows (pad_from measured at load)", file=sys.stderr)
    context = [100 + i % 1000 for i in range(args.context)]
    times: dict[tuple[str, int], list[float]] = {}
    for target in targets.values():
        target.prefill(context[:-1])
    for _ in range(args.reps):  # interleaved: drift in the machine's speed falls on both alike
        for positions in range(1, args.max_positions + 1):
            for name, target in targets.items():
                start = time.perf_counter()
                target.forward(context[-1:] + [5] * (positions - 1), len(context) - 1)
                times.setdefault((name, positions), []).append(time.perf_counter() - start)
    ms = {key: statistics.median(v) * 1e3 for key, v in times.items()}
    titles = {"packed": f"packed for {args.packed_rows} rows"}
    print("T (k = T-1)" + "".join(f"   {titles.get(name, name + ' kernels') + ' ms':>26}   v(k)" for name in targets))
    for positions in range(1, args.max_positions + 1):
        print(f"{positions:>2} (k={positions - 1})  " + "".join(
            f"   {ms[name, positions]:26.1f}  {ms[name, positions] / ms[name, 1]:5.2f}" for name in targets))
    return 0


if __name__ == "__main__":
    sys.exit(main())
