"""The GPU check's sessions and table; scripts/gpu-check installs everything, then runs this.

For each engine asked for (--engines exl2,exl3) and the torch backend, the same built-in prompts
(one of each class first) are decoded plainly (k = 0) and speculatively, interleaved per prompt:

  exl2 model   ExLlamaV2: SmolLM2 FP16 folder, drafted by an 8-layer FP16 folder of itself
  exl2 ngram   ExLlamaV2: the same target, drafted by n-gram prompt lookup
  exl3 model   ExLlamaV3: the same two folders
  exl3 ngram   ExLlamaV3: the same target, n-gram drafts
  torch model  the torch backend on CUDA (float16) with the same two folders

It prints one table (tokens/s, acceptance, draft and verify ms, the most VRAM NVML saw in a round)
as Markdown for the README, whether each speculative output equals its own plain greedy output,
how each engine's plain output compares with torch's, then a short `specmon bench policy` per
engine (the held-out half of the bench set, k in 0,2,4, one pass). Exits 1 if any ExLlamaV2 or
ExLlamaV3 speculative output leaves plain decoding other than at a near-tie.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specmon.backends import modelstore
from specmon.backends.hf_folder import folder_for_gguf
from specmon.backends.loader import load_pair
from specmon.engine.prompts import builtin_suite
from specmon.engine.driver import SessionDriver, new_session_id
from specmon.sched.pairing import run_paired
from specmon.events.schema import PromptFinished, RoundVerified
from specmon.metrics.rates import speedup
from specmon.metrics.stats import RunStats
from specmon.backends.profiles import load_profile

DRAFT_LAYERS = 8


def _profile(tmp: Path, name: str, body: str):
    path = tmp / f"{name}.toml"
    path.write_text(f'name = "{name}"\nmax_seq_len = 2048\n{body}')
    return load_profile(str(path))


BACKENDS = {"exl2": "exllamav2", "exl3": "exllamav3"}


def configurations(tmp: Path, target_dir: Path, draft_dir: Path, engines: list[str]) -> dict:
    target = f'device = "cuda"\ndtype = "float16"\n[target]\npath = "{target_dir}"\n'
    drafters = {
        "model": f'[drafter]\nkind = "model"\n[drafter.target]\npath = "{draft_dir}"\n',
        "ngram": '[drafter]\nkind = "ngram"\n',
    }
    chosen = [(engine, BACKENDS[engine], drafter) for engine in engines for drafter in drafters]
    chosen.append(("torch", "torch", "model"))
    return {
        f"{engine} {drafter}": _profile(
            tmp, f"{engine}-{drafter}", f'backend = "{backend}"\n' + target + drafters[drafter]
        )
        for engine, backend, drafter in chosen
    }


def run_config(profile, prompts, k: int, max_new_tokens: int) -> list:
    pair = load_pair(profile)
    events: list = []
    sampling = profile.sampling.to_event()
    for chosen, emit in ((prompts[:1], lambda e: None), (prompts, events.append)):
        driver = SessionDriver(new_session_id(), pair.target, pair.tokenizer, emit, profile.tie_margin)
        run_paired(driver, chosen, pair.drafter, k, sampling, max_new_tokens)
    return events  # the first call warmed up kernels and caches; only the second is measured


def fold(events: list, k: int) -> dict:
    runs = {0: RunStats(0), k: RunStats(k)}
    mem = 0
    for ev in events:
        if isinstance(ev, RoundVerified):
            runs[ev.draft_len].add_round(ev)
            mem = max(mem, ev.mem_bytes or 0)
        elif isinstance(ev, PromptFinished):
            runs[ev.draft_len].add_finish(ev)
    plain, spec = runs[0], runs[k]
    return {
        "plain tok/s": plain.tok_per_s,
        "spec tok/s": spec.tok_per_s,
        "speedup": speedup(spec.goodput, plain.goodput),
        "acceptance": spec.acceptance_rate,
        "accepted/round": spec.mean_accepted_len,
        "draft ms": spec.mean_ms(spec.draft_ms),
        "verify ms": spec.mean_ms(spec.verify_ms),
        "plain step ms": plain.mean_ms(plain.verify_ms),
        "VRAM GiB": mem / 2**30,
        "spec vs plain": dict(spec.verdicts),
    }


def outputs(events: list) -> dict[str, list[int]]:
    return {ev.prompt_id: ev.generated for ev in events if isinstance(ev, PromptFinished) and ev.draft_len == 0}


def agreement(a: dict[str, list[int]], b: dict[str, list[int]]) -> str:
    """Prompts whose plain greedy outputs are identical, and the shortest common prefix otherwise."""
    same = sum(a[p] == b[p] for p in a)
    prefixes = [
        next((i for i, (x, y) in enumerate(zip(a[p], b[p])) if x != y), min(len(a[p]), len(b[p])))
        for p in a
        if a[p] != b[p]
    ]
    tail = f"; others agree for their first {min(prefixes)}+ tokens" if prefixes else ""
    return f"{same}/{len(a)} prompts identical{tail}"


def fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if value < 10 else f"{value:.1f}"
    if isinstance(value, dict):
        return ", ".join(f"{n} {v}" for v, n in sorted(value.items())) or "-"
    return "-" if value is None else str(value)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=10, help="built-in prompts to decode (default 10)")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("-k", type=int, default=4, help="draft length (default 4)")
    parser.add_argument("--engines", default="exl2,exl3", help="engines whose extension built (default exl2,exl3)")
    parser.add_argument("--build-seconds", default="-", help="extension build times, for the table")
    parser.add_argument("--no-bench", action="store_true", help="skip the short bench policy per engine")
    return parser


def bench_policy(profile, out: Path | None) -> str:
    """A short `specmon bench policy` on this profile: its figures' last lines, and how long it took."""
    command = [sys.executable, "-m", "specmon.cli", "bench", "policy", "--profile", str(profile.source)]
    command += ["--prompts", "bench", "--half", "test", "--ks", "0,2,4", "--repeat", "1", "--max-new-tokens", "48"]
    command += ["--fresh"] + (["--json", str(out)] if out else [])
    t0 = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)
    text = done.stdout if done.returncode == 0 else f"exit {done.returncode}: {done.stderr.strip()[-600:]}"
    return f"{text.rstrip()}\n({time.perf_counter() - t0:.0f} s)"


def markdown(rows: dict, columns: list[str]) -> list[str]:
    lines = ["| config | " + " | ".join(columns) + " |", "|" + "---|" * (len(columns) + 1)]
    return lines + ["| " + " | ".join([name] + [fmt(row[c]) for c in columns]) + " |" for name, row in rows.items()]


def main() -> int:
    args = build_parser().parse_args()
    import torch

    suite = builtin_suite()
    prompts = sorted(suite, key=lambda p: suite.index(p) % 4)[: args.prompts]  # a spread over the classes first
    gguf = modelstore.resolve(modelstore.SMOLLM2.name)
    t0 = time.perf_counter()
    target_dir, draft_dir = folder_for_gguf(gguf), folder_for_gguf(gguf, DRAFT_LAYERS)
    export_s = time.perf_counter() - t0
    engines = [e for e in args.engines.split(",") if e]
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    rows, plain_out, benches = {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        profiles = configurations(Path(tmp), target_dir, draft_dir, engines)
        for name, profile in profiles.items():
            t0 = time.perf_counter()
            events = run_config(profile, prompts, args.k, args.max_new_tokens)
            rows[name] = fold(events, args.k) | {"wall s": time.perf_counter() - t0}
            plain_out[name] = outputs(events)
        for engine in [] if args.no_bench else engines:
            json_out = out / f"bench-policy-{engine}.json" if out else None
            benches[engine] = bench_policy(profiles[f"{engine} model"], json_out)
    gpu = torch.cuda.get_device_name()
    print(
        f"\nspecmon GPU check on {gpu} (torch {torch.__version__}), SmolLM2-135M FP16 folders, "
        f"draft = first {DRAFT_LAYERS} layers, k = {args.k}, greedy, {len(prompts)} prompts x "
        f"{args.max_new_tokens} new tokens; export {export_s:.1f}s, extension builds {args.build_seconds}"
    )
    columns = [
        "plain tok/s",
        "spec tok/s",
        "speedup",
        "acceptance",
        "accepted/round",
        "draft ms",
        "verify ms",
        "plain step ms",
        "VRAM GiB",
        "wall s",
        "spec vs plain",
    ]
    table = markdown(rows, columns)
    print("\n".join(table))
    cross = {e: agreement(plain_out[f"{e} model"], plain_out["torch model"]) for e in engines}
    for engine, said in cross.items():
        print(f"plain greedy, {BACKENDS[engine]} vs torch (both FP16, different kernels): {said}")
    for engine, said in benches.items():
        print(f"\nspecmon bench policy on {BACKENDS[engine]}:\n{said}")
    if out:
        (out / "gpu-check.md").write_text("\n".join(table) + "\n")
        (out / "gpu-check.json").write_text(
            json.dumps({"gpu": gpu, "torch": torch.__version__, "rows": rows, "vs_torch": cross}, indent=1, default=str)
        )
    bad = [n for n in rows if n.split()[0] in BACKENDS and rows[n]["spec vs plain"].get("diverged")]
    if bad:
        print(f"FAIL: speculative output left plain greedy decoding beyond near-ties in {', '.join(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
