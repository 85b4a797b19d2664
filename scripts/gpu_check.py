"""The GPU check's sessions and table; scripts/gpu-check installs everything, then runs this.

Three configurations decode the same built-in prompts (one of each class first), each one
plainly (k = 0) and speculatively, interleaved per prompt by the engine:

  exl2 model   ExLlamaV2: SmolLM2 FP16 folder, drafted by an 8-layer FP16 folder of itself
  exl2 ngram   ExLlamaV2: the same target, drafted by n-gram prompt lookup
  torch model  the torch backend on CUDA (float16) with the same two folders

It prints one table (tokens/s, acceptance, draft and verify ms, VRAM), whether each speculative
output equals its own plain greedy output, and how ExLlamaV2's plain output compares with torch's.
Exits 1 if any ExLlamaV2 speculative output leaves plain decoding other than at a near-tie.
"""

from __future__ import annotations

import argparse
import json
import os
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


def configurations(tmp: Path, target_dir: Path, draft_dir: Path) -> dict:
    exl2 = 'backend = "exllamav2"\ndevice = "cuda"\ndtype = "float16"\n'
    torch_cuda = 'backend = "torch"\ndevice = "cuda"\ndtype = "float16"\n'
    model_draft = f'[drafter]\nkind = "model"\n[drafter.target]\npath = "{draft_dir}"\n'
    return {
        "exl2 model": _profile(tmp, "exl2-model", exl2 + f'[target]\npath = "{target_dir}"\n' + model_draft),
        "exl2 ngram": _profile(
            tmp, "exl2-ngram", exl2 + f'[target]\npath = "{target_dir}"\n[drafter]\nkind = "ngram"\n'
        ),
        "torch model": _profile(tmp, "torch-model", torch_cuda + f'[target]\npath = "{target_dir}"\n' + model_draft),
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
    parser.add_argument("--build-seconds", type=int, default=None, help="extension build time, for the table")
    return parser


def main() -> int:
    args = build_parser().parse_args()
    import torch

    suite = builtin_suite()
    prompts = sorted(suite, key=lambda p: suite.index(p) % 4)[: args.prompts]  # a spread over the classes first
    gguf = modelstore.resolve(modelstore.SMOLLM2.name)
    t0 = time.perf_counter()
    target_dir, draft_dir = folder_for_gguf(gguf), folder_for_gguf(gguf, DRAFT_LAYERS)
    export_s = time.perf_counter() - t0
    rows, plain_out = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, profile in configurations(Path(tmp), target_dir, draft_dir).items():
            t0 = time.perf_counter()
            events = run_config(profile, prompts, args.k, args.max_new_tokens)
            rows[name] = fold(events, args.k) | {"wall s": time.perf_counter() - t0}
            plain_out[name] = outputs(events)
    gpu = torch.cuda.get_device_name()
    print(
        f"\nspecmon GPU check on {gpu} (torch {torch.__version__}), SmolLM2-135M FP16 folders, "
        f"draft = first {DRAFT_LAYERS} layers, k = {args.k}, greedy, {len(prompts)} prompts x "
        f"{args.max_new_tokens} new tokens; export {export_s:.1f}s, extension build {fmt(args.build_seconds)}s"
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
    print(" | ".join(["config"] + columns))
    for name, row in rows.items():
        print(" | ".join([name] + [fmt(row[c]) for c in columns]))
    cross = agreement(plain_out["exl2 model"], plain_out["torch model"])
    print(f"plain greedy, ExLlamaV2 vs torch (both FP16, different kernels): {cross}")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "gpu-check.json").write_text(
            json.dumps(
                {"gpu": gpu, "torch": torch.__version__, "rows": rows, "exl2_vs_torch": cross}, indent=1, default=str
            )
        )
    bad = [n for n in rows if n.startswith("exl2") and rows[n]["spec vs plain"].get("diverged")]
    if bad:
        print(f"FAIL: speculative output left plain greedy decoding beyond near-ties in {', '.join(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
