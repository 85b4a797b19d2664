#!/usr/bin/env python
"""What the proxy's routing rule (policy.route) costs a class, simulated: the Router with the shipped
[routing] section, over seeded runs whose requests answer at a fixed spec/plain ratio with a
prompt-to-prompt spread, against the rule before it (a first choice only at min_requests a side).

Per horizon (requests of the class) and ratio: the class's goodput as a share of the better side's,
and in how many runs a wrong first choice was still standing at the end. No model, no sockets:

    .venv/bin/python scripts/sim_routing.py [--seeds 200] [--spread 0.15]"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import sys
from pathlib import Path
from unittest import mock

from specmon.policy import route
from specmon.policy.schema import load_policy
from specmon.proxy.routing import PLAIN, SPEC, Router

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' event factory
from events import request_timed  # noqa: E402

TOKENS, PLAIN_TOK_S = 128, 25.0
RATIOS = (0.86, 0.92, 0.97, 1.03, 1.08)
HORIZONS = (18, 36, 60, 300)


def settle_at_min(side: str, est, min_requests: int) -> str:
    """The rule before: no move at all until each side has min_requests."""
    if min(est.prompts_spec, est.prompts_plain) < min_requests or est.ratio is None:
        return side
    if est.verdict in ("faster", "slower"):
        return SPEC if est.verdict == "faster" else PLAIN
    return (SPEC if est.ratio >= 1.0 else PLAIN) if side == route.BOTH else side


def run(ratio: float, n: int, seed: int, spread: float) -> tuple[float, bool]:
    """(goodput over the better side's, whether the class ended on the slower side)."""
    router, rng = Router(load_policy("default"), "sim", has_plain=True), random.Random(seed)
    tokens = ms = 0.0
    for i in range(n):
        side = router.side("chat")
        speed = PLAIN_TOK_S * (ratio if side == SPEC else 1.0) * rng.uniform(1 - spread, 1 + spread)
        ev = request_timed(
            session_id="sim",
            t=float(i),
            request_id=f"r{i}",
            upstream=side,
            predicted_n=TOKENS,
            predicted_ms=TOKENS / speed * 1e3,
        )
        tokens, ms = tokens + TOKENS, ms + ev.predicted_ms
        router.observe(ev)
    better = PLAIN_TOK_S * max(ratio, 1.0)
    return tokens / ms * 1e3 / better, router.classes["chat"].side == (PLAIN if ratio >= 1.0 else SPEC)


def table(seeds: int, spread: float) -> None:
    print(f"goodput / the better side's (mean of {seeds} runs; wrong: runs ending on the slower side)")
    print("horizon  rule    " + "  ".join(f"{r:>12.2f}x" for r in RATIOS))
    for n in HORIZONS:
        for name, patch in (("now", None), ("before", settle_at_min)):
            cells = []
            for ratio in RATIOS:
                with mock.patch.object(route, "choose", patch) if patch else contextlib.nullcontext():
                    got = [run(ratio, n, s, spread) for s in range(seeds)]
                cells.append(f"{statistics.mean(g for g, _ in got):.4f} w{sum(w for _, w in got):>3}")
            print(f"{n:>7}  {name:<6}  " + "  ".join(cells))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=200, help="runs per cell (default 200)")
    parser.add_argument("--spread", type=float, default=0.15, help="each request's speed x U(1-s, 1+s) (default 0.15)")
    args = parser.parse_args()
    table(args.seeds, args.spread)
    return 0


if __name__ == "__main__":
    sys.exit(main())
