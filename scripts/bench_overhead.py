#!/usr/bin/env python
"""The engine's own cost: plain decoding through the session driver's round loop vs a bare loop,
same backend.

The round loop adds the drafter call, accept, bookkeeping, margins and one event per round
(here appended to a list and written to a session log, as in a real run). Repetitions alternate
so drift cancels; prints the median ratio.

    python scripts/bench_overhead.py --tokens 64 --reps 6
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from specmon.backends.loader import load_pair
from specmon.engine.drafters import NoDrafter
from specmon.engine.draft_len import FixedDraftLen
from specmon.engine.driver import SessionDriver
from specmon.engine.prompts import Prompt
from specmon.events.log import LogWriter
from specmon.events.schema import RoundVerified, Sampling
from specmon.backends.profiles import DrafterSpec, load_profile

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def bare_loop(target, tokens: list[int], n_new: int) -> float:
    """Greedy decoding with nothing but the target's forward and an argmax."""
    start = time.perf_counter()
    target.forward(tokens[:-1], 0)
    prefill = time.perf_counter() - start
    context = list(tokens)
    start = time.perf_counter()
    for _ in range(n_new):
        logits = target.forward([context[-1]], len(context) - 1)
        context.append(int(logits[-1].argmax()))
    return (time.perf_counter() - start) * 1e3, prefill


def round_loop(target, tokenizer, n_new: int, log: LogWriter):
    events = []

    def emit(event):
        events.append(event)
        log.write(event)

    driver = SessionDriver("bench", target, tokenizer, emit, 0.0)
    prompt = Prompt("p", PROMPT, "c", token_ids=tuple(tokenizer.encode_chat(PROMPT)))  # encoded outside the clock
    start = time.perf_counter()
    run = driver.decode(prompt, NoDrafter(), FixedDraftLen(0), Sampling(), n_new).run
    total = (time.perf_counter() - start) * 1e3
    return total - run.prefill_ms, [e for e in events if isinstance(e, RoundVerified)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="smollm2-cpu")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--reps", type=int, default=6)
    args = parser.parse_args()
    pair = load_pair(load_profile(args.profile), DrafterSpec(kind="none"))
    pair.target.eos_id = -1  # never stop early: both loops decode exactly --tokens tokens
    tokens = pair.tokenizer.encode_chat(PROMPT)
    ratios, own_share = [], []
    with tempfile.TemporaryDirectory() as tmp, LogWriter(Path(tmp) / "bench.specmon") as log:
        bare_loop(pair.target, tokens, 8)  # warm-up
        for rep in range(args.reps):
            order = ["bare", "loop"] if rep % 2 == 0 else ["loop", "bare"]
            times = {}
            for which in order:
                if which == "bare":
                    times["bare"], _ = bare_loop(pair.target, tokens, args.tokens)
                else:
                    times["loop"], events = round_loop(pair.target, pair.tokenizer, args.tokens, log)
                    own = sum(e.draft_ms + e.overhead_ms for e in events)
                    own_share.append(own / sum(e.draft_ms + e.verify_ms + e.overhead_ms for e in events))
            ratios.append(times["loop"] / times["bare"])
            print(
                f"rep {rep}: bare {times['bare']:.0f} ms, round loop {times['loop']:.0f} ms, ratio {ratios[-1]:.4f}",
                flush=True,
            )
    print(
        f"median round-loop / bare-loop time over {args.reps} reps of {args.tokens} tokens: "
        f"{statistics.median(ratios):.4f} (overhead {100 * (statistics.median(ratios) - 1):+.2f}%)"
    )
    print(
        f"engine's own share of round time, from the events (draft + overhead ms, the emit included): "
        f"median {100 * statistics.median(own_share):.2f}%, max {100 * max(own_share):.2f}%"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
