#!/usr/bin/env python
"""What a plain round costs with an n-gram drafter beside it, against none: same engine, same prompts.

On llama.cpp, `bench policy` logs showed the fixed-k and policy arms' plain rounds (the drafter
found no match) about 1% slower than the k=0 arm's, which is the whole margin of the policy's
"at least 0.98x plain where nothing pays". This times the round loop's plain rounds under NoDrafter
and under the plain n-gram lookup at k=8 on question prompts (few matches), prompt by prompt,
which arm goes first alternating, and splits the drafter arm's plain rounds into those right after
a drafted round (the engine's pass changes shape back to one row) and the rest.

    python scripts/bench_idle_drafter.py --profile smollm2-llamacpp --reps 8
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace

from specmon.backends.loader import load_pair
from specmon.backends.profiles import load_profile
from specmon.engine.draft_len import FixedDraftLen
from specmon.engine.drafters import NgramDrafter, NoDrafter
from specmon.engine.driver import UNCHECKED, SessionDriver
from specmon.engine.prompts import load_prompts
from specmon.events.schema import RoundVerified, Sampling
from specmon.metrics.rates import round_ms
from specmon.sched.bench import shipped_prompts

TOKENS = 64


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="smollm2-llamacpp")
    ap.add_argument("--reps", type=int, default=8, help="passes over the prompts (default 8)")
    ap.add_argument("--prompts", type=int, default=4, help="question prompts of the drift set (default 4)")
    args = ap.parse_args()
    pair = load_pair(load_profile(args.profile))
    prompts = [p for p in load_prompts(shipped_prompts("drift")) if p.id.startswith("questions-")][: args.prompts]
    rounds: dict[str, list[float]] = {"none": [], "ngram, after a draft": [], "ngram, other": []}
    arm = {"name": "none", "drafted": False}

    def emit(ev) -> None:
        if not isinstance(ev, RoundVerified):
            return
        if not ev.proposed:
            name = (
                arm["name"] if arm["name"] == "none" else "ngram, after a draft" if arm["drafted"] else "ngram, other"
            )
            rounds[name].append(round_ms(ev))
        arm["drafted"] = bool(ev.proposed)

    driver = SessionDriver("idle-drafter", pair.target, pair.tokenizer, emit, 0.0)
    for rep in range(args.reps):
        for prompt in prompts:
            arms = [("none", NoDrafter(), 0), ("ngram", NgramDrafter(), 8)]
            for name, drafter, k in arms[:: -1 if rep % 2 else 1]:
                arm.update(name=name, drafted=False)
                played = replace(prompt, max_new_tokens=TOKENS)
                done = driver.decode(played, drafter, FixedDraftLen(k), Sampling(), TOKENS, prompt_class="q", bench_k=k)
                driver.finish(done, UNCHECKED)
    base = statistics.median(rounds["none"])
    for name, ms in rounds.items():
        if ms:
            print(
                f"{name:22} {len(ms):5} plain rounds, median {statistics.median(ms):.3f} ms, "
                f"{statistics.median(ms) / base:.3f}x none's"
            )


if __name__ == "__main__":
    main()
