#!/usr/bin/env python
"""Is a (suggested) policy ever slower than plain decoding? Per class, every built-in prompt is
decoded at the k the policy fixes for its class and plainly, interleaved (the order alternates),
and the goodput ratio is printed. Classes with speculate = "auto" run at their starting k.

    python scripts/check_policy_vs_plain.py suggested.toml --max-new-tokens 48 --repeat 2
"""

from __future__ import annotations

import argparse
import itertools
import sys

from specmon.backends.loader import load_pair
from specmon.engine.drafters import NoDrafter
from specmon.engine.prompts import builtin_suite
from specmon.engine.rounds import RoundContext, decode_prompt
from specmon.events.schema import Sampling
from specmon.policy.classify import classify
from specmon.policy.engine import start_k
from specmon.policy.schema import load_policy
from specmon.profiles import load_profile


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("policy")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    policy = load_policy(args.policy)
    pair = load_pair(load_profile("smollm2-cpu"))
    totals: dict[str, dict[str, list[float]]] = {}
    ids = itertools.count()
    for index, prompt in enumerate(builtin_suite() * args.repeat):
        name, _ = classify(policy, prompt.text)
        cls = policy.classes[policy.class_index(name)]
        k = 0 if cls.speculate == "off" else start_k(cls)
        runs = [("policy", k), ("plain", 0)][:: 1 if index % 2 else -1]
        for label, draft_len in runs:
            drafter = pair.drafter if draft_len else NoDrafter()
            events = []
            ctx = RoundContext("check", prompt.id, name, ids)
            decode_prompt(pair.target, drafter, pair.tokenizer.encode_chat(prompt.text), draft_len, Sampling(),
                          args.max_new_tokens, ctx, events.append)
            acc = totals.setdefault(name, {}).setdefault(label, [0.0, 0.0])
            acc[0] += sum(len(e.emitted) for e in events)
            acc[1] += sum(e.draft_ms + e.verify_ms + e.overhead_ms for e in events)
        print(f"[{index + 1}] {prompt.id} -> {name} k={k}", file=sys.stderr)
    for name, runs in totals.items():
        pol, plain = (runs[x][0] / runs[x][1] * 1e3 for x in ("policy", "plain"))
        cls = policy.classes[policy.class_index(name)]
        print(f"{name:<12} speculate={cls.speculate:<4} k={0 if cls.speculate == 'off' else start_k(cls)}  "
              f"policy {pol:6.1f} tok/s  plain {plain:6.1f} tok/s  ratio {pol / plain:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
