"""The engines measured: `specmon bench verify`, the v(k) of the predicted speedup (metrics.predict), and
`specmon bench engines`, plain tok/s and the n-gram speedup over each engine's own plain decoding, engines
interleaved per prompt (specmon/sched/engines.py).

On a CPU, MKL's fp32 gemm reads the weights once per 3 rows, so without packing a 4-position verify
costs about twice a plain step; weights packed for `packed_rows` rows are read once for all rows."""

from __future__ import annotations

import os

import msgspec
from rich.markup import escape
from rich.table import Table

from specmon.backends.profiles import DrafterSpec, load_profile, resolve_model_path
from specmon.console import err, out, progress
from specmon.cli.run import check_json, write_json
from specmon.engine.costs import time_passes
from specmon.engine.prompts import builtin_suite
from specmon.errors import SpecmonError
from specmon.metrics.format import fmt
from specmon.metrics.rates import ratio
from specmon.tables import figures_table
from specmon.sched import engines as eng


def cmd_bench_verify(args) -> int:
    check_json(args.json)
    profile = load_profile(args.profile)
    targets, pad_from = _load_targets(profile, args.packed_rows)
    with progress("timing verify passes", args.reps) as done:
        ms = time_passes(targets, args.context, args.reps, args.max_positions, done)
    costs = {name: {t: ratio(ms[name][t], ms[name][1]) for t in ms[name]} for name in ms}
    title = (
        f"verify pass cost: {profile.target.describe()} ({profile.backend}), "
        f"{args.context} tokens of context, least of {args.reps}"
    )
    out.print(verify_table(ms, costs, title))
    write_json(
        args.json,
        {
            "profile": profile.name,
            "context": args.context,
            "reps": args.reps,
            "layouts": {name: {"ms": ms[name], "cost": costs[name]} for name in ms},  # json writes T as a string
            "pad_from": pad_from,
        },
    )
    return 0


def _load_targets(profile, packed_rows: int) -> tuple[dict, int | None]:
    """The profile's target (torch: with plain kernels and with packed weights) and the packed one's pad_from."""
    from specmon.backends.loader import load_pair  # torch: only once every input is checked

    layouts = (("plain", 0), ("packed", packed_rows)) if profile.backend == "torch" else ((profile.backend, 0),)
    with err.status(escape(f"loading {profile.target.describe()}")):
        targets = {
            name: load_pair(msgspec.structs.replace(profile, packed_rows=rows), DrafterSpec(kind="none")).target
            for name, rows in layouts
        }
    packed = targets["packed"].model if "packed" in targets else None
    if packed is not None and not packed.packed_rows:
        err.print("this torch or profile cannot pack weights (MKL, fp32 on the CPU): packed = plain")
    elif packed is not None:
        err.print(
            f"packed: passes of {packed.pad_from}..{packed_rows} positions run as {packed_rows} rows "
            "(pad_from measured at load)"
        )
    return targets, packed.pad_from if packed is not None and packed.packed_rows else None


def verify_table(ms: dict, costs: dict, title: str) -> Table:
    caption = (
        "v(k) = ms of a pass over T positions (with what it costs the plain step after it) / ms of "
        "a one-position plain step"
    )
    table = figures_table(
        title, ["T (k = T-1)", *(f"{name} {what}" for name in ms for what in ("ms", "v(k)"))], caption
    )
    for t in next(iter(ms.values())):
        table.add_row(
            f"{t} (k={t - 1})", *(cell for name in ms for cell in (f"{ms[name][t]:.1f}", fmt(costs[name][t])))
        )
    return table


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
