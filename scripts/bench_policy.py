#!/usr/bin/env python
"""The `auto` policy against every fixed draft length, per class, on the built-in suite.

Fixed k = 0..8 are interleaved prompt by prompt (rotating order) so drift falls on all alike;
the policy then runs the suite --repeat times, learning as it goes. A class's goodput is
Σ emitted / Σ round ms over all its rounds, the policy's own plain re-measures and probes
included. Also prints the policy's own work per round against round time.

    python scripts/bench_policy.py --drafter ngram --max-new-tokens 48 --repeat 3
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time

from rich.console import Console
from rich.table import Table

from specmon.backends.loader import build_drafter, load_pair
from specmon.engine.prompts import builtin_suite
from specmon.engine.rounds import RoundContext, decode_prompt
from specmon.engine.session import RunSettings
from specmon.events.schema import RoundVerified, Sampling
from specmon.policy.engine import PolicyEngine
from specmon.policy.schema import load_policy
from specmon.policy.session import run_policy_prompts
from specmon.profiles import DrafterSpec, load_profile


def goodput(rounds) -> float:
    ms = sum(r.draft_ms + r.verify_ms + r.overhead_ms for r in rounds)
    return sum(len(r.emitted) for r in rounds) / ms if ms else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--drafter", default="ngram", choices=["ngram", "layerskip"])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--ks", default="0,1,2,3,4,5,6,7,8")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--policy", default="policies/default.toml")
    args = parser.parse_args()
    profile = load_profile("smollm2-cpu")
    pair = load_pair(profile, DrafterSpec(kind="none"))
    drafter = build_drafter(DrafterSpec(kind=args.drafter, layers=args.layers), profile, pair.target, pair.tokenizer)
    prompts = builtin_suite()
    ks = [int(k) for k in args.ks.split(",")]
    console = Console(stderr=True)
    fixed: dict[int, list[RoundVerified]] = {k: [] for k in ks}
    ids = itertools.count()
    for index, prompt in enumerate(prompts):
        tokens = pair.tokenizer.encode_chat(prompt.text)
        shift = index % len(ks)
        for k in ks[shift:] + ks[:shift]:
            ctx = RoundContext("bench", prompt.id, prompt.prompt_class, ids)
            decode_prompt(pair.target, drafter, tokens, k, Sampling(), args.max_new_tokens, ctx, fixed[k].append)
        console.print(f"fixed k: {index + 1}/{len(prompts)} prompts", highlight=False)
    policy = load_policy(args.policy)
    engine = PolicyEngine(policy, "bench")
    auto_events, paired_plain = [], []
    settings = RunSettings(4, Sampling(), args.max_new_tokens, 1e-4)
    policy_s = _timed_policy(engine)
    sequence = prompts * args.repeat

    def plain_twin(done: int) -> None:
        """Right after each policy-run prompt, the same prompt plainly: a baseline from the same minute."""
        prompt = sequence[done - 1]
        name = next(e.prompt_class for e in reversed(auto_events) if isinstance(e, RoundVerified))
        ctx = RoundContext("bench", prompt.id, name, ids)
        decode_prompt(pair.target, drafter, pair.tokenizer.encode_chat(prompt.text), 0, Sampling(),
                      args.max_new_tokens, ctx, paired_plain.append)
        console.print(f"auto: {done}/{len(sequence)}", highlight=False)

    run_policy_prompts("bench", pair.target, drafter, pair.tokenizer, sequence, settings, engine,
                       auto_events.append, plain_twin)
    auto_rounds = [e for e in auto_events if isinstance(e, RoundVerified)]
    _print(fixed, auto_rounds, paired_plain, ks, args)
    round_ms = sum(r.draft_ms + r.verify_ms + r.overhead_ms for r in auto_rounds)
    print(f"policy's own work: {policy_s['s'] * 1e3:.1f} ms over {len(auto_rounds)} rounds "
          f"({100 * policy_s['s'] * 1e3 / round_ms:.3f}% of {round_ms / 1e3:.1f} s of round time)")
    return 0


def _timed_policy(engine: PolicyEngine) -> dict:
    """Wrap the engine's per-round and per-prompt calls with a stopwatch."""
    spent = {"s": 0.0}
    for name in ("observe", "maybe_reload", "decide", "plan", "classify", "round_k"):
        original = getattr(engine, name)

        def timed(*a, _f=original, **kw):
            start = time.perf_counter()
            try:
                return _f(*a, **kw)
            finally:
                spent["s"] += time.perf_counter() - start
        setattr(engine, name, timed)
    return spent


def _print(fixed, auto_rounds, paired_plain, ks, args) -> None:
    """auto/best compares ratios to plain taken in the same phase, so drift between phases cancels."""
    table = Table(title=f"goodput, tokens/s ({args.drafter}, greedy, {args.max_new_tokens} new tokens)",
                  title_justify="left")
    for col in ["class", *(f"k={k}" for k in ks), "best fixed", "auto", "plain beside auto", "auto/plain",
                "best/plain", "auto/best"]:
        table.add_column(col, justify="left" if col == "class" else "right")
    for cls in dict.fromkeys(r.prompt_class for r in fixed[ks[0]]):
        rates = {k: 1e3 * goodput([r for r in fixed[k] if r.prompt_class == cls]) for k in ks}
        best = max(rates, key=rates.get)
        auto = 1e3 * goodput([r for r in auto_rounds if r.prompt_class == cls])
        twin = 1e3 * goodput([r for r in paired_plain if r.prompt_class == cls])
        best_ratio = rates[best] / rates[0]
        table.add_row(cls, *(f"{rates[k]:.1f}" for k in ks), f"k={best} {rates[best]:.1f}", f"{auto:.1f}",
                      f"{twin:.1f}", f"{auto / twin:.3f}", f"{best_ratio:.3f}", f"{auto / twin / best_ratio:.3f}")
    Console(width=200).print(table)


if __name__ == "__main__":
    sys.exit(main())
