"""`specmon bench policy`: the policy against every fixed k, per class, in one interleaved run; and
`specmon policy tune LOG`, the tuning replay of such a run's log (specmon/replay/tune.py), printed."""

from __future__ import annotations

from pathlib import Path

import msgspec
from rich.console import Group
from rich.markup import escape
from rich.table import Table

from specmon.backends.profiles import check_model_drafter, load_profile
from specmon.backends.tokenizer import profile_tokenizer
from specmon.console import err, out, progress, say
from specmon.cli.run import check_json, load_saying, write_json
from specmon.cli.sweep import parse_floats, parse_ks
from specmon.errors import SpecmonError
from specmon.metrics import rates
from specmon.metrics.format import MISSING, fmt
from specmon.policy.engine import PolicyEngine
from specmon.policy.schema import load_policy
from specmon.replay.tune import check_prompts, cost_of, figures, read_bench_log, replay
from specmon.sched.bench import BenchClass, bench_prompts, bench_results, overall_figures, prompt_phases, run_bench
from specmon.sched.policy import PolicyScheduler
from specmon.tables import CLASS_WIDTH, Note, compact_table, figures_table, heading, print_host_line
from specmon.cli.flags import memory_options
from specmon.transport.session import live_session


def cmd_bench(args) -> int:
    profile = load_profile(args.profile)
    policy = load_policy(args.policy)
    ks = parse_ks(args.ks)
    prompts = bench_prompts(args)
    spec = msgspec.structs.replace(
        profile.drafter,
        kind=args.drafter or profile.drafter.kind,
        layers=profile.drafter.layers if args.layers is None else args.layers,
    )
    if spec.kind == "none":
        raise SpecmonError(f"profile {profile.source} has no drafter; pick one with --drafter")
    check_model_drafter(spec, profile)
    check_json(args.json)
    sampling = profile.sampling.to_event()
    pair = load_saying(profile, spec)
    remembers = memory_options(args, profile, pair.drafter.name, spec)
    with live_session(pair, profile, args.log, policy=policy, **remembers) as session:
        engine = PolicyEngine(policy, session.session_id, session.costs, session.policy_shelf(sampling))
        scheduler = PolicyScheduler(session.driver, engine, pair.drafter)
        what = f"policy and k={','.join(map(str, ks))}"
        try:
            with progress(escape(what), len(prompts) * args.repeat) as done:
                run_bench(scheduler, prompts, ks, args.repeat, sampling, args.max_new_tokens, args.fixed_passes, done)
        except KeyboardInterrupt:
            session.finish("interrupted")
            err.print("bench interrupted: the table covers the prompts that finished")
    phases = prompt_phases(prompts)  # a drift stream: each phase reported apart
    results = bench_results(session.events, phases)
    by = "phase" if phases else "class"
    half = f" ({args.half} half)" if args.half else ""
    title = (
        f"goodput, tokens/s: {pair.drafter.name}, policy {Path(policy.source).name}, {args.max_new_tokens} new tokens, "
        f"{len(prompts)} prompts{half} x {args.repeat}"
    )
    out.print(bench_table(results, ks, title, by, session.log_path))
    out.print(interval_line(results))
    out.print(explore_line(results))
    stalls = print_host_line(session.events)
    overall = overall_figures(results, ks)
    work = rates.ratio(scheduler.policy_ms, sum(c.auto.round_ms for c in results.values()))  # of its rounds' time
    out.print(overall_line(overall, scheduler.policy_ms, work))
    write_json(
        args.json,
        {
            "classes": {n: c.to_json() for n, c in results.items()},
            "by": by,  # what the keys of "classes" are
            "overall": overall,
            "policy_ms": scheduler.policy_ms,
            "policy_work_share": work,
            "disturbed_rounds": stalls.disturbed,
            "measured_rounds": stalls.measured,
        },
    )
    return 0


def interval_line(results: dict[str, BenchClass]) -> Note:
    """auto/best's 95% interval over prompts per class (the best fixed k, picked after the fact, is favoured by its noise)."""
    parts = []
    for name, c in results.items():
        est = c.auto_over_best()
        known = est is not None and est.low is not None
        parts.append(f"{name} " + (f"[{est.low:.3f}, {est.high:.3f}]" if known else "n/a"))
    return Note("auto/best, 95% interval over prompts: " + "; ".join(parts), whole=tuple(parts))


def explore_line(results: dict[str, BenchClass]) -> Note:
    """Per class, the rounds that verified a draft the table had cut (explore_budget) and their share of the policy's time."""
    parts = [f"{name} {c.explored.rounds} rounds, {fmt(c.explore_cost(), '{:+.2%}')}" for name, c in results.items()]
    return Note("exploring cut drafts (rounds, cost of the policy's time): " + "; ".join(parts), whole=tuple(parts))


def overall_line(overall: dict, policy_ms: float, work: float | None) -> Note:
    """Every class together: auto against the best single fixed k, with its interval, and the policy's own work."""
    auto = f"auto {fmt(overall['auto'], '{:.1f}')} tok/s"
    best = f"k={overall['best_k']} {fmt(overall['best'], '{:.1f}')}"
    bounds = overall["auto_over_best_interval"]
    ratio = fmt(overall["auto_over_best"], "{:.3f}") + (f" [{bounds[0]:.3f}, {bounds[1]:.3f}]" if bounds else "")
    spent = f"{policy_ms:.1f} ms = {fmt(work, '{:.3%}')}"
    return Note(
        f"all classes: {auto}; best single fixed {best}; auto/best single {ratio}; "
        f"policy work {spent} of the policy's round time",
        whole=(auto, best, f"auto/best single {ratio}", spent),
    )


K_COLUMNS = 9  # fixed k a table row holds: 9 of them and a 16-character class fit 80 columns
BENCH_LEGEND = (
    "goodput = emitted tokens / s of round time; best fixed: the fixed k of highest goodput; "
    "auto: the policy, counting what it spends learning; best/plain, auto/plain, auto/best: ratios of "
    "goodput (k=0 is plain); ~ busy host: 10%+ of the class's rounds waited for a CPU other work held"
)


def bench_table(
    results: dict[str, BenchClass], ks: list[int], title: str, by: str = "class", log: Path | None = None
) -> Group:
    """In 80 columns: goodput at each fixed k (9 a table), then best fixed, the policy and the ratios, then a legend."""
    names = {name: name + ("~" if c.host.busy else "") for name, c in results.items()}
    as_json = {name: c.to_json() for name, c in results.items()}
    tables = []
    for i in range(0, len(ks), K_COLUMNS):
        shown = ks[i : i + K_COLUMNS]
        table = _table(names, (by, *(f"k={k}" for k in shown)))
        for name, f in as_json.items():
            table.add_row(escape(names[name]), *(fmt(f["fixed"].get(str(k)), "{:.1f}") for k in shown))
        tables.append(table)
    ratios = _table(names, (by, "best fixed", "auto", "best/plain", "auto/plain", "auto/best"))
    for name, f in as_json.items():
        best = results[name].best_k
        best_text = MISSING if best is None else f"k={best} {fmt(f['fixed'][str(best)], '{:.1f}')}"
        shares = (fmt(f[r], "{:.3f}") for r in ("best_over_plain", "auto_over_plain", "auto_over_best"))
        ratios.add_row(escape(names[name]), best_text, fmt(f["auto"], "{:.1f}"), *shares)
    return Group(heading(title, log), *tables, ratios, Note(BENCH_LEGEND, "dim"))


def _table(names: dict[str, str], columns: tuple[str, ...]) -> Table:
    """A bench table whose headers and figures never wrap: a long class (or phase) name folds instead."""
    width = min(CLASS_WIDTH, max(map(len, names.values()), default=5))
    table = compact_table("", columns, left=columns[:1], class_width=width)
    for column in table.columns[1:]:
        column.no_wrap = True
    return table


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
    prompts = [p for p in bench_prompts(args) if p.id in bench.texts]  # as the bench chose them, --half too
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
    costs = parse_floats(text, "--costs")
    if not all(c > 0 for c in costs):
        raise SpecmonError(
            f"--costs {text!r}: expected comma-separated positive numbers, the cost in plain steps "
            "of a round proposing 1, 2, ... tokens"
        )
    return {i + 1: c for i, c in enumerate(costs)}


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
