"""The engines and the server measured: `specmon bench verify` (the v(k) of metrics.predict), `bench engines`
(specmon/sched/engines.py says how) and `bench serve`, where server and driver take turns (which goes first
alternates, so drift falls on both) and a chunk's tokens are counted from the log's rounds (each names its round).

On a CPU, MKL's fp32 gemm reads the weights once per 3 rows, so without packing a 4-position verify
costs about twice a plain step; weights packed for `packed_rows` rows are read once for all rows."""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import msgspec
import numpy as np
from rich.markup import escape
from rich.table import Table

from specmon.backends.profiles import DrafterSpec, load_profile, resolve_model_path
from specmon.console import err, out, progress, say
from specmon.cli.run import check_json, load_saying, write_json
from specmon.textfile import check_new_log
from specmon.cli.serve_clients import Streamed
from specmon.engine.costs import time_passes
from specmon.engine.draft_len import FixedDraftLen, check_draft_len
from specmon.engine.driver import UNCHECKED
from specmon.engine.prompts import prompt_set
from specmon.errors import SpecmonError
from specmon.events.log import read_log
from specmon.events.schema import PromptFinished, RoundVerified, Sampling
from specmon.metrics import rates
from specmon.metrics.format import fmt
from specmon.sched import engines as eng
from specmon.sched.bench import prompts_path
from specmon.sched.turns import rotated
from specmon.tables import figures_table


def cmd_bench_verify(args) -> int:
    check_json(args.json)
    profile = load_profile(args.profile)
    targets, pad_from = _load_targets(profile, args.packed_rows)
    with progress("timing verify passes", args.reps) as done:
        ms = time_passes(targets, args.context, args.reps, args.max_positions, done)
    costs = {name: {t: rates.ratio(ms[name][t], ms[name][1]) for t in ms[name]} for name in ms}
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
    reference = check_reference(args.reference, args.llamacpp_profile)
    prompts = prompt_set(None, args.classes)  # the built-in suite
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


def ask(clients: subprocess.Popen, texts: list[str], count: int, max_tokens: int) -> tuple[float, list[Streamed]]:
    """A batch streamed by the client process, `count` requests at once: its wall time and each request's."""
    clients.stdin.write(json.dumps({"texts": texts, "clients": count, "max_tokens": max_tokens}) + "\n")
    clients.stdin.flush()
    line = clients.stdout.readline()
    if not line:
        raise SpecmonError(f"the benchmark's client process ended (exit {clients.wait()}); its error is above")
    answer = json.loads(line)
    if answer["errors"]:
        raise SpecmonError(f"a streamed request failed: {answer['errors'][0]}")
    return answer["wall"], [Streamed(**r) for r in answer["results"]]


def cmd_bench_serve(args) -> int:
    if importlib.util.find_spec("openai") is None:
        raise SpecmonError(
            "bench serve streams through the official openai client, which is not installed: pip install openai"
        )
    check_json(args.json)
    check_new_log(args.log)  # before a minute of model loading, not after
    profile = load_profile(args.profile)
    k = check_draft_len(profile.drafter.draft_len if args.draft_len is None else args.draft_len, "-k")
    prompts = prompt_set(prompts_path(args.prompts), None)
    prompts = prompts[:: max(1, len(prompts) // args.count)][: args.count]
    with ExitStack() as stack:
        log = args.log or Path(stack.enter_context(tempfile.TemporaryDirectory())) / "bench-serve.specmon"
        runs = _measure(profile, k, prompts, args, log)
        events = list(read_log(log))
    result = figures(runs, events)
    out.print(serve_table(result, f"serving vs direct: {profile.name}, k={k}, greedy, {args.max_tokens} tokens max"))
    say(
        f"medians: prefill {result['prefill_ms']:.1f} ms, first round {result['first_round_ms']:.1f} ms "
        f"(TTFT aim at 1 client: <= {result['prefill_ms'] + result['first_round_ms'] + 5:.1f} ms)"
    )
    write_json(args.json, {**result, "profile": profile.name, "draft_len": k, "max_tokens": args.max_tokens})
    return 0


def _measure(profile, k: int, prompts, args, log: Path) -> dict:
    """One session: the server and the driver take turns per prompt, then `clients` at once."""
    from specmon.server.runner import ServeOptions, Serving
    from specmon.transport.session import live_session

    pair = load_saying(profile)
    with live_session(pair, profile, log, serve=False, announce=False, keep_events=False) as session:
        server = Serving(session, pair, profile, ServeOptions(port=0, max_queue=64, draft_len=k))
        server.start()
        child = [sys.executable, "-m", "specmon.cli.serve_clients", server.url]  # exits when its stdin closes
        try:
            with subprocess.Popen(child, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as clients:
                ask(clients, ["Hello!"], 1, 8)  # a warm-up: its imports and allocations, not timed
                one, direct_runs = [], []
                with progress("served and direct, in turn", len(prompts) * args.repeat) as done:
                    for rep in range(args.repeat):
                        for i, prompt in enumerate(prompts):
                            steps = [
                                lambda: one.extend(ask(clients, [prompt.text], 1, args.max_tokens)[1]),
                                lambda: direct_runs.append(
                                    direct(session.driver, pair.drafter, k, prompt, args.max_tokens)
                                ),
                            ]
                            for step in rotated(steps, i + rep):
                                step()
                            done(rep * len(prompts) + i + 1)
                many_wall, many = ask(clients, [p.text for p in prompts], args.clients, args.max_tokens)
        finally:
            server.stop()
    return {"one": one, "direct": direct_runs, "many": many, "many_wall": many_wall, "clients": args.clients}


def direct(driver, drafter, k: int, prompt, max_tokens: int) -> tuple[float, int]:
    """(seconds, tokens) of the session driver decoding the prompt itself, as `specmon run` does."""
    start = time.perf_counter()
    done = driver.decode(prompt, drafter, FixedDraftLen(k), Sampling(), max_tokens, class_rule="bench: direct")
    driver.finish(done, UNCHECKED)
    return time.perf_counter() - start, len(done.run.generated)


def latencies(results: list[Streamed], emitted: dict[int, int]) -> tuple[list[float], list[float]]:
    """Time to first token per request; per-token latency (gap / tokens the gap brought) per token."""
    ttft, per_token = [], []
    for r in results:
        if not r.chunks:
            continue
        ttft.append(r.chunks[0][0] - r.sent)
        for (t0, id0), (t1, id1) in zip(r.chunks, r.chunks[1:]):
            tokens = sum(emitted.get(i, 0) for i in range(id0 + 1, id1 + 1))
            per_token += [(t1 - t0) / tokens] * tokens if tokens else []
    return ttft, per_token


def _ms(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) * 1e3 if values else None


def _row(path: str, clients: int, results: list[Streamed], tok_s: float, direct_tok_s: float, emitted) -> dict:
    ttft, per_token = latencies(results, emitted)
    return {
        "path": path,
        "clients": clients,
        "requests": len(results),
        "tok_s": tok_s,
        "vs_direct": rates.ratio(tok_s, direct_tok_s),
        "ttft_p50_ms": _ms(ttft, 50),
        "ttft_p99_ms": _ms(ttft, 99),
        "per_token_p50_ms": _ms(per_token, 50),
        "per_token_p99_ms": _ms(per_token, 99),
    }


def figures(runs: dict, events: list) -> dict:
    """The table's rows (direct, served at 1 client, served at `clients`) and the log's medians."""
    emitted = {e.round_id: len(e.emitted) for e in events if isinstance(e, RoundVerified)}
    direct_tok_s = sum(t for _, t in runs["direct"]) / sum(s for s, _ in runs["direct"])
    one_tok_s = sum(r.tokens for r in runs["one"]) / sum(r.done - r.sent for r in runs["one"])
    many_tok_s = sum(r.tokens for r in runs["many"]) / runs["many_wall"]
    rows = [
        {**_row("direct (driver)", 1, [], direct_tok_s, direct_tok_s, emitted), "requests": len(runs["direct"])},
        _row("served, streamed", 1, runs["one"], one_tok_s, direct_tok_s, emitted),
        _row("served, streamed", runs["clients"], runs["many"], many_tok_s, direct_tok_s, emitted),
    ]
    prefill = statistics.median(e.prefill_ms for e in events if isinstance(e, PromptFinished))
    first = statistics.median(rates.round_ms(e) for e in events if isinstance(e, RoundVerified) and e.round_index == 0)
    return {"rows": rows, "prefill_ms": prefill, "first_round_ms": first}


def serve_table(result: dict, title: str) -> Table:
    caption = "tok/s at the client; TTFT and per-token latency at the client (queue wait included)"
    kinds = (("TTFT", "ttft"), ("per-token", "per_token"))
    columns = [
        "path",
        "clients",
        "requests",
        "tok/s",
        "vs direct",
        *(f"{w} p{q} ms" for w, _ in kinds for q in (50, 99)),
    ]
    table = figures_table(title, columns, caption)
    for r in result["rows"]:
        cells = [r["path"], str(r["clients"]), str(r["requests"]), f"{r['tok_s']:.1f}", f"{r['vs_direct']:.3f}x"]
        ms = (r[f"{key}_p{q}_ms"] for _, key in kinds for q in (50, 99))
        table.add_row(*cells, *("-" if value is None else f"{value:.1f}" for value in ms))
    return table
