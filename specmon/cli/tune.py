"""`specmon policy tune LOG`: the tuning replay of a `bench policy` log (specmon/replay/tune.py), printed."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape
from rich.table import Table

from specmon.backends.tokenizer import profile_tokenizer
from specmon.sched.bench import prompt_half, prompts_path
from specmon.console import out, progress, say
from specmon.cli.run import check_json, write_json
from specmon.cli.sweep import parse_ks
from specmon.engine.prompts import prompt_set
from specmon.errors import SpecmonError
from specmon.metrics.format import fmt
from specmon.policy.schema import load_policy
from specmon.tables import figures_table
from specmon.replay.tune import check_prompts, cost_of, figures, read_bench_log, replay


def cmd_tune(args) -> int:
    check_json(args.json)
    policy, ks = load_policy(args.policy), parse_ks(args.ks)
    bench = read_bench_log(args.log)
    costs = parse_costs(args.costs) if args.costs else bench.costs
    if not costs:
        raise SpecmonError(
            f"{args.log}: too few speculative rounds to fit round costs on (5 of one proposal length); give --costs"
        )
    pad_from = bench.pad_from if args.pad_from is None else args.pad_from
    tokenizer = profile_tokenizer(args.profile)
    prompts = [
        p
        for p in prompt_set(prompts_path(args.prompts), args.classes)
        if p.id in bench.texts and (not args.half or prompt_half(p.id) == args.half)
    ]
    check_prompts(prompts, bench, tokenizer, args.log)
    say(
        f"pad_from {pad_from}: a confident draft fills a padded verify pass"
        if pad_from
        else "no padded verify passes: a confident draft stops at its match"
    )
    say("cost of L proposed tokens, plain steps: " + " ".join(f"{n}:{c:.2f}" for n, c in sorted(costs.items())))
    with progress("replaying", len(prompts) * args.repeat) as done:
        tuned = replay(policy, prompts, bench, tokenizer, cost_of(costs), pad_from, ks, args.repeat, done)
    result = figures(tuned, ks)
    title = f"goodput over plain, modelled costs: {Path(policy.source).name}, {len(prompts)} prompts x {args.repeat}"
    out.print(tune_table(result, ks, title))
    overall = result["overall"]
    say(
        f"auto against the best single k (k={overall['best_k']}) over all classes: "
        f"{fmt(overall['auto_over_best'], '{:.3f}')}; {result['decisions']} decisions"
    )
    write_json(
        args.json,
        {
            **result,
            "costs": dict(sorted(costs.items())),
            "pad_from": pad_from,
            "ks": ks,
            "prompts": len(prompts),
            "repeat": args.repeat,
        },
    )
    return 0


def parse_costs(text: str) -> dict[int, float]:
    """--costs 1.17,1.23,...: a round proposing L = 1, 2, ... tokens, in plain steps."""
    try:
        costs = {i + 1: float(x) for i, x in enumerate(text.split(","))}
    except ValueError:
        costs = {}
    if not costs or not all(0 < c < float("inf") for c in costs.values()):
        raise SpecmonError(
            f"--costs {text!r}: expected comma-separated positive numbers, the cost in plain steps "
            "of a round proposing 1, 2, ... tokens"
        )
    return costs


def tune_table(result: dict, ks: list[int], title: str) -> Table:
    caption = "goodput = emitted tokens / modelled round time; auto counts what the policy spends learning"
    table = figures_table(title, ["class", *(f"k={k}" for k in ks), "auto", "auto/best"], caption)
    for name, c in result["classes"].items():
        table.add_row(
            escape(name),
            *(fmt(c["over_plain"][str(k)], "{:.3f}") for k in ks),
            fmt(c["auto_over_plain"], "{:.3f}"),
            f"{fmt(c['auto_over_best'], '{:.3f}')} (k={c['best_k']})",
        )
    return table
