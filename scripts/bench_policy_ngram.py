#!/usr/bin/env python
"""The n-gram drafter's confidence test alone, with the policy off: every prompt decoded plainly,
at fixed k with the plain lookup (last 3, then 2 tokens), and at the same k with each confidence
setting (min_match/min_seen), one right after the other in a rotating order, so drift on a
shared machine falls on all alike. Prints goodput per task type (the prompt file's class) and
each setting's ratio to plain and to the plain lookup.

A setting drafts as the product does: past its match where the target's verify pass is padded
to more rows anyway. A setting ending in "c" stops at the match's length however the pass runs.

    python scripts/bench_policy_ngram.py --prompts bench --half test --k 8 --confident 2/1,2/1c
"""

from __future__ import annotations

import argparse
import sys

from rich.table import Table

from specmon.backends.loader import load_pair
from specmon.backends.profiles import load_profile
from specmon.cli.console import out, progress
from specmon.cli.bench import _prompts_path
from specmon.engine.draft_len import FixedDraftLen
from specmon.engine.drafters import NgramDrafter, NoDrafter
from specmon.engine.driver import UNCHECKED, SessionDriver
from specmon.engine.prompts import prompt_set
from specmon.events.schema import RoundVerified
from specmon.metrics.stats import RunStats
from specmon.sched.bench import prompt_half


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="smollm2-cpu")
    parser.add_argument("--prompts", default="bench")
    parser.add_argument("--half", choices=["tune", "test"])
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--confident", default="2/1,3/1", help="min_match/min_seen settings, comma-separated")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args = parser.parse_args()
    from pathlib import Path

    prompts = prompt_set(_prompts_path(Path(args.prompts)), None)
    if args.half:
        prompts = [p for p in prompts if prompt_half(p.id) == args.half]
    settings = [s for s in args.confident.split(",") if s]
    profile = load_profile(args.profile)
    pair = load_pair(profile)
    rounds: list[RoundVerified] = []
    driver = SessionDriver("ngram-bench", pair.target, pair.tokenizer,
                           lambda ev: rounds.append(ev) if isinstance(ev, RoundVerified) else None, 0.0)
    sampling = profile.sampling.to_event()
    capped = NgramDrafter(profile.drafter.ngram_sizes)
    padded = NgramDrafter(profile.drafter.ngram_sizes, getattr(pair.target, "verify_rows", None))
    configs = [("plain", 0, None, capped), (f"lookup k={args.k}", args.k, None, capped)]
    for setting in settings:
        min_match, min_seen = (int(x) for x in setting.rstrip("c").split("/"))
        drafter = capped if setting.endswith("c") else padded
        configs.append((f"conf {setting} k={args.k}", args.k, (min_match, min_seen), drafter))
    stats: dict[str, dict[str, RunStats]] = {}
    with progress("n-gram confidence", len(prompts)) as done:
        for index, prompt in enumerate(prompts):
            shift = index % len(configs)
            for name, k, conf, drafter in configs[shift:] + configs[:shift]:
                drafter.confident(*conf) if conf else drafter.confident(0)
                start = len(rounds)
                run = driver.decode(prompt, drafter if k else NoDrafter(), FixedDraftLen(k), sampling,
                                    args.max_new_tokens)
                driver.finish(run, UNCHECKED)
                for ev in rounds[start:]:
                    for group in (prompt.prompt_class, "ALL"):
                        stats.setdefault(group, {}).setdefault(name, RunStats(k)).add_round(ev)
            done(index + 1)
            print(f"{index + 1}/{len(prompts)} {prompt.id}", file=sys.stderr, flush=True)
    names = [c[0] for c in configs]
    table = Table(title=f"goodput tok/s, n-gram confidence alone (policy off), {len(prompts)} prompts"
                        f"{' (' + args.half + ' half)' if args.half else ''}, {args.max_new_tokens} new tokens")
    for col in ["task", *names, *(f"{n}/plain" for n in names[1:]), *(f"{n}/lookup" for n in names[2:]),
                *(f"prop% {n}" for n in names[1:])]:
        table.add_column(col, justify="right")
    for group, by in stats.items():
        rate = {n: by[n].tok_per_s for n in names}
        props = [f"{100 * (1 - by[n].empty_rounds / by[n].rounds):.0f}" for n in names[1:]]
        table.add_row(group, *(f"{rate[n]:.1f}" for n in names), *(f"{rate[n] / rate['plain']:.3f}" for n in names[1:]),
                      *(f"{rate[n] / rate[names[1]]:.3f}" for n in names[2:]), *props)
    out.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
