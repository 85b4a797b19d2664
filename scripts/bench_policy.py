#!/usr/bin/env python
"""The `auto` policy against every fixed draft length, per class, on the built-in suite.

The policy decodes the suite --repeat times, learning as it goes; right after each of its
prompts, the same prompt is decoded at every fixed k (0 = plain) in an order that rotates, so
drift in the machine's speed falls on the policy and on every fixed k alike. --fixed-passes N
keeps the fixed k > 0 to the first N passes (slow drafters, long sessions); plain still runs
beside every policy prompt, so auto/plain stays paired. A class's goodput
is Σ emitted / Σ round ms over all its rounds, the policy's own plain re-measures and probes
included. Also prints the policy's own work per round against round time.

    python scripts/bench_policy.py --drafter ngram --max-new-tokens 48 --repeat 3
    python scripts/bench_policy.py --drafter layerskip --max-new-tokens 48 --repeat 6 --fixed-passes 1

--log PATH keeps the policy run's events, for `specmon policy explain PATH` and `specmon replay`.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from specmon.backends.loader import load_pair
from specmon.engine.prompts import builtin_suite
from specmon.engine.rounds import RoundContext, decode_prompt
from specmon.engine.session import RunSettings
from specmon.events.log import LogWriter
from specmon.events.schema import RoundVerified, Sampling
from specmon.policy.engine import PolicyEngine
from specmon.policy.schema import load_policy
from specmon.policy.session import run_policy_prompts
from specmon.profiles import DrafterSpec, load_profile


def round_time(rounds) -> float:
    return sum(r.draft_ms + r.verify_ms + r.overhead_ms for r in rounds)


def goodput(rounds) -> float:
    ms = round_time(rounds)
    return sum(len(r.emitted) for r in rounds) / ms if ms else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--drafter", default="ngram", choices=["ngram", "layerskip"])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--ks", default="0,1,2,3,4,5,6,7,8")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--policy", default="policies/default.toml")
    parser.add_argument("--fixed-passes", type=int, default=0,
                        help="run the fixed k > 0 only in the first N passes over the suite (0: all); "
                             "plain (k = 0) still runs beside every policy prompt")
    parser.add_argument("--log", type=Path, help="write the policy run's events here")
    args = parser.parse_args()
    profile = load_profile("smollm2-cpu")
    pair = load_pair(profile, DrafterSpec(kind="none"))
    drafter = pair.make_drafter(DrafterSpec(kind=args.drafter, layers=args.layers))
    prompts = builtin_suite()
    ks = [int(k) for k in args.ks.split(",")]
    console = Console(stderr=True)
    fixed: dict[int, list[RoundVerified]] = {k: [] for k in ks}
    ids = itertools.count()
    engine = PolicyEngine(load_policy(args.policy), "bench")
    auto_events: list = []
    settings = RunSettings(4, Sampling(), args.max_new_tokens, 1e-4)
    policy_s = _timed_policy(engine)
    sequence = prompts * args.repeat

    def fixed_ks(done: int) -> None:
        """Right after each policy-run prompt, the same prompt at every fixed k, in a rotating order."""
        prompt = sequence[done - 1]
        name = next(e.prompt_class for e in reversed(auto_events) if isinstance(e, RoundVerified))
        tokens = pair.tokenizer.encode_chat(prompt.text)
        shift = done % len(ks)
        passes_done = (done - 1) // len(prompts)
        for k in ks[shift:] + ks[:shift]:
            if k and args.fixed_passes and passes_done >= args.fixed_passes:
                continue
            ctx = RoundContext("bench", prompt.id, name, ids)
            decode_prompt(pair.target, drafter, tokens, k, Sampling(), args.max_new_tokens, ctx, fixed[k].append)
        console.print(f"{done}/{len(sequence)} prompts (policy, then k={','.join(map(str, ks))})", highlight=False)

    run_policy_prompts("bench", pair.target, drafter, pair.tokenizer, sequence, settings, engine,
                       auto_events.append, fixed_ks)
    auto_rounds = [e for e in auto_events if isinstance(e, RoundVerified)]
    if args.log:
        with LogWriter(args.log) as log:
            for event in auto_events:
                log.write(event)
    _print(fixed, auto_rounds, ks, args)
    _print_time_by_k(auto_rounds)
    round_ms = round_time(auto_rounds)
    print(f"policy's own work: {policy_s['s'] * 1e3:.1f} ms over {len(auto_rounds)} rounds "
          f"({100 * policy_s['s'] * 1e3 / round_ms:.3f}% of {round_ms / 1e3:.1f} s of round time)")
    return 0


def _timed_policy(engine: PolicyEngine) -> dict:
    """Wrap the engine's per-round and per-prompt calls with a stopwatch."""
    spent = {"s": 0.0}
    for name in ("observe", "maybe_reload", "decide", "decide_due", "plan", "classify", "round_k"):
        original = getattr(engine, name)

        def timed(*a, _f=original, **kw):
            start = time.perf_counter()
            try:
                return _f(*a, **kw)
            finally:
                spent["s"] += time.perf_counter() - start
        setattr(engine, name, timed)
    return spent


def _print(fixed, auto_rounds, ks, args) -> None:
    table = Table(title=f"goodput, tokens/s ({args.drafter}, greedy, {args.max_new_tokens} new tokens, "
                        f"suite x {args.repeat})", title_justify="left")
    for col in ["class", *(f"k={k}" for k in ks), "best fixed", "auto", "best/plain", "auto/plain", "auto/best"]:
        table.add_column(col, justify="left" if col == "class" else "right")
    for cls in dict.fromkeys(r.prompt_class for r in fixed[ks[0]]):
        rates = {k: 1e3 * goodput([r for r in fixed[k] if r.prompt_class == cls]) for k in ks}
        best = max(rates, key=rates.get)
        auto = 1e3 * goodput([r for r in auto_rounds if r.prompt_class == cls])
        table.add_row(cls, *(f"{rates[k]:.1f}" for k in ks), f"k={best} {rates[best]:.1f}", f"{auto:.1f}",
                      f"{rates[best] / rates[0]:.3f}", f"{auto / rates[0]:.3f}", f"{auto / rates[best]:.3f}")
    Console(width=220).print(table)


def _print_time_by_k(auto_rounds) -> None:
    """Where the policy run's time went, per class: share of round time and rounds at each k."""
    for cls in dict.fromkeys(r.prompt_class for r in auto_rounds):
        rounds = [r for r in auto_rounds if r.prompt_class == cls]
        total = round_time(rounds)
        parts = []
        for k in sorted({r.draft_len for r in rounds}):
            at = [r for r in rounds if r.draft_len == k]
            ms = round_time(at)
            parts.append(f"k={k}: {len(at)} rounds {100 * ms / total:.0f}%")
        print(f"auto {cls}: " + ", ".join(parts))


if __name__ == "__main__":
    sys.exit(main())
