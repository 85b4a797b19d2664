"""`specmon bench engines`: plain tok/s and the n-gram speedup over each engine's own plain decoding,
engines interleaved per prompt (specmon/sched/engines.py)."""

from __future__ import annotations

import os

from rich.markup import escape
from rich.table import Table

from specmon.backends.profiles import load_profile, resolve_model_path
from specmon.console import err, out, progress
from specmon.cli.run import check_json, write_json
from specmon.engine.prompts import builtin_suite
from specmon.errors import SpecmonError
from specmon.metrics.format import fmt
from specmon.tables import figures_table
from specmon.sched import engines as eng


def cmd_bench_engines(args) -> int:
    names = eng.engine_names(args.engines)
    check_json(args.json)
    if args.threads < 0:
        raise SpecmonError(f"--threads must be >= 0 (0: torch's default), not {args.threads}")
    reference = check_reference(args.reference, args.llamacpp_profile)
    prompts = builtin_suite([c.strip() for c in args.classes.split(",") if c.strip()] if args.classes else None)
    from specmon.backends.loader import set_threads  # torch: only once every input is checked

    threads = set_threads(args.threads)  # the llama.cpp backend takes the same count
    skipped = {}

    def skip(name: str, reason: str) -> None:
        skipped[name] = reason
        err.print(f"{name}: skipped ({reason})", highlight=False, markup=False, soft_wrap=True)

    profiles = {"torch": args.profile, "llamacpp": args.llamacpp_profile}
    with err.status("loading engines"):
        drivers = eng.load_engines(names, profiles, skip)
    if not drivers:
        raise SpecmonError("no engine could be loaded: " + "; ".join(f"{n}: {r}" for n, r in skipped.items()))
    eng.warm_up(drivers)
    reference = (*reference, threads) if reference else None  # on the engines' thread count
    err.print(
        f"threads {threads}, {len(prompts)} prompts x {args.reps} reps, {args.tokens} new tokens, "
        "greedy, engines interleaved per prompt",
        highlight=False,
    )
    with progress("engines", len(prompts) * args.reps) as done:
        bench = eng.run(drivers, prompts, args.reps, args.tokens, args.draft_len, reference, done)
    result = eng.figures(bench, prompts)
    title = f"engines, {len(prompts)} prompts x {args.reps}, {args.tokens} new tokens, greedy"
    out.print(engines_table(result, args.draft_len, title))
    out.print(classes_table(result, args.draft_len))
    write_json(
        args.json,
        {
            **result,
            "skipped": skipped,
            "draft_len": args.draft_len,
            "tokens": args.tokens,
            "reps": args.reps,
            "threads": threads,
        },
    )
    return 0


def check_reference(binary: str | None, profile_name: str) -> tuple[str, str] | None:
    """(--reference, the llamacpp profile's GGUF), or None; both checked usable before any model loads."""
    if not binary:
        return None
    if not os.path.isfile(binary) or not os.access(binary, os.X_OK):
        raise SpecmonError(
            f"--reference {binary}: no such program (build scripts/llamacpp_reference.cpp; see that file)"
        )
    from specmon.backends.llamacpp_loader import import_llama_cpp

    import_llama_cpp()  # its one-line SpecmonError says how to install it
    profile = load_profile(profile_name)
    return binary, str(resolve_model_path(profile.target, profile))


def engines_table(result: dict, k: int, title: str) -> Table:
    caption = (
        f"plain tok/s = Σ tokens / Σ decode ms; speedup = n-gram k={k} goodput / the engine's own plain "
        "goodput [95% interval over prompts]; identical: speculative output = its own plain"
    )
    base = next(iter(result["engines"]))
    columns = ["engine", "plain tok/s", f"vs {base}", f"n-gram k={k} speedup", "95% interval", "identical"]
    table = figures_table(title, columns, caption)
    for name, e in result["engines"].items():
        interval = f"[{fmt(e['interval'][0])}, {fmt(e['interval'][1])}]" if e.get("interval") else ""
        speed = f"{fmt(e['ngram_speedup'])}x ({e['verdict']})" if "ngram_speedup" in e else ""
        same = f"{e['identical']}/{e['compared']}" if "identical" in e else ""
        table.add_row(escape(name), fmt(e["plain_tok_s"], "{:.1f}"), f"{fmt(e['vs_first'])}x", speed, interval, same)
    return table


def classes_table(result: dict, k: int) -> Table:
    names = [n for n, e in result["engines"].items() if "ngram_speedup" in e]
    table = figures_table(
        f"n-gram k={k} speedup by class (each engine over its own plain)", ["class", *map(escape, names)]
    )
    for cls, by in result["classes"].items():
        table.add_row(escape(cls), *(f"{fmt(by[n]['speedup'])}x ({by[n]['verdict']})" for n in names))
    return table
