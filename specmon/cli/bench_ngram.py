"""`specmon bench policy --confident SETTINGS`: the n-gram confidence test alone, policy off
(specmon/sched/ngram_bench.py), printed as goodput per class and each setting's ratio to plain
and to the plain lookup."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from specmon.backends.profiles import DrafterSpec, load_profile
from specmon.console import err, out, progress
from specmon.cli.run import check_writable, write_json
from specmon.cli.sweep import parse_ks
from specmon.engine.driver import SessionDriver
from specmon.errors import SpecmonError
from specmon.metrics.format import fmt
from specmon.metrics.rates import ratio, speedup
from specmon.sched.bench import bench_prompts
from specmon.sched.ngram_bench import parse_settings, run_ngram_bench


def cmd_bench_ngram(args) -> int:
    k = max(parse_ks(args.ks))
    if not k:
        raise SpecmonError("--confident compares drafts at the largest k of --ks; give one above 0")
    settings = parse_settings(args.confident, k)
    profile = load_profile(args.profile)
    prompts = bench_prompts(args)
    if args.json:
        check_writable(args.json, "--json")
    from specmon.backends.loader import load_pair  # torch: only once every input is checked

    with err.status(escape(f"loading {profile.target.describe()}")):
        pair = load_pair(profile, DrafterSpec(kind="none"))
    driver = SessionDriver("bench-ngram", pair.target, pair.tokenizer, lambda event: None, profile.tie_margin)
    with progress("n-gram confidence", len(prompts)) as done:
        stats = run_ngram_bench(
            driver,
            profile.drafter.ngram_sizes,
            getattr(pair.target, "verify_rows", None),
            prompts,
            settings,
            profile.sampling.to_event(),
            args.max_new_tokens,
            done,
        )
    names = [s.name for s in settings]
    rates = {group: {n: by[n].tok_per_s for n in names} for group, by in stats.items()}
    half = f" ({args.half} half)" if args.half else ""
    out.print(
        ngram_table(
            stats,
            rates,
            names,
            f"goodput tok/s, n-gram confidence alone (policy off), {len(prompts)} "
            f"prompts{half}, {args.max_new_tokens} new tokens",
        )
    )
    if args.json:
        write_json(
            args.json,
            {
                "k": k,
                "settings": names,
                "tok_per_s": rates,
                "over_plain": {g: {n: speedup(r[n], r["plain"]) for n in names[1:]} for g, r in rates.items()},
            },
        )
    return 0


def ngram_table(stats: dict, rates: dict, names: list[str], title: str) -> Table:
    table = Table(title=escape(title), title_justify="left")
    table.caption = "prop%: rounds that proposed a draft; a setting ending in c caps each draft at its match's length"
    for col in [
        "task",
        *names,
        *(f"{n}/plain" for n in names[1:]),
        *(f"{n}/lookup" for n in names[2:]),
        *(f"prop% {n}" for n in names[1:]),
    ]:
        table.add_column(escape(col), justify="right")
    for group, by in stats.items():
        rate = rates[group]
        props = [fmt(ratio(100 * (by[n].rounds - by[n].empty_rounds), by[n].rounds), "{:.0f}") for n in names[1:]]
        table.add_row(
            escape(group),
            *(fmt(rate[n], "{:.1f}") for n in names),
            *(fmt(speedup(rate[n], rate["plain"]), "{:.3f}") for n in names[1:]),
            *(fmt(speedup(rate[n], rate[names[1]]), "{:.3f}") for n in names[2:]),
            *props,
        )
    return table
