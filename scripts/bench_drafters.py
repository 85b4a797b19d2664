#!/usr/bin/env python
"""Per class and drafter: acceptance, mean accepted length and speedup over plain decoding.

Every prompt is decoded plainly and with each (drafter, k) configuration, in an order that
rotates from prompt to prompt, so machine drift falls on all of them alike. Prints ratios
measured in this one run; asserts nothing.

    python scripts/bench_drafters.py                      # whole suite, ngram k=2..8, layerskip k=1,2
    python scripts/bench_drafters.py --classes rewrite --max-new-tokens 48
"""

from __future__ import annotations

import argparse
import itertools
import sys

from rich.console import Console
from rich.table import Table

from specmon.backends.loader import load_pair
from specmon.engine.drafters import NoDrafter
from specmon.engine.prompts import builtin_suite
from specmon.engine.rounds import RoundContext, decode_prompt
from specmon.events.schema import Sampling
from specmon.metrics.stats import class_stats
from specmon.profiles import DrafterSpec, load_profile


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="smollm2-cpu")
    parser.add_argument("--classes", help="comma-separated built-in classes")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--ngram-k", default="2,4,6,8")
    parser.add_argument("--layerskip-k", default="1,2")
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args()
    profile = load_profile(args.profile)
    pair = load_pair(profile, DrafterSpec(kind="none"))
    configs = [("ngram", int(k)) for k in args.ngram_k.split(",") if k] + \
              [("layerskip", int(k)) for k in args.layerskip_k.split(",") if k]
    drafters = {name: pair.make_drafter(DrafterSpec(kind=name, layers=args.layers))
                for name in {c[0] for c in configs}}
    prompts = builtin_suite(args.classes.split(",") if args.classes else None)
    plain_events, config_events = [], {c: [] for c in configs}
    ids = itertools.count()
    runs = [("plain", 0), *configs]
    console = Console(stderr=True)
    for index, prompt in enumerate(prompts):
        tokens = pair.tokenizer.encode_chat(prompt.text)
        shift = index % len(runs)
        for name, k in runs[shift:] + runs[:shift]:
            sink = plain_events if name == "plain" else config_events[(name, k)]
            drafter = NoDrafter() if name == "plain" else drafters[name]
            ctx = RoundContext("bench", prompt.id, prompt.prompt_class, ids)
            decode_prompt(pair.target, drafter, tokens, k, Sampling(), args.max_new_tokens, ctx, sink.append)
        console.print(f"[{index + 1}/{len(prompts)}] {prompt.id}", highlight=False)
    Console(width=160).print(_table(plain_events, config_events, pair.drafter, args))
    return 0


def _table(plain_events, config_events, _, args) -> Table:
    table = Table(title=f"greedy, {args.max_new_tokens} new tokens per prompt, plain decoding interleaved",
                  title_justify="left")
    for col in ("class", "drafter", "k", "accept rate", "mean acc len", "draft ms", "verify ms",
                "tok/s", "plain tok/s", "speedup"):
        table.add_column(col, justify="left" if col in ("class", "drafter") else "right")
    for (name, k), events in config_events.items():
        for cls, stats in class_stats(plain_events + events).items():
            spec, base = stats.runs[k], stats.baseline
            table.add_row(cls, name, str(k), _f(spec.acceptance_rate), _f(spec.mean_accepted_len),
                          _f(spec.mean_ms(spec.draft_ms)), _f(spec.mean_ms(spec.verify_ms)),
                          _f(spec.tok_per_s, 1), _f(base.tok_per_s, 1), _f(stats.speedup(k)) + "×")
        table.add_section()
    return table


def _f(value, digits=2) -> str:
    return "N/A" if value is None else f"{value:.{digits}f}"


if __name__ == "__main__":
    sys.exit(main())
