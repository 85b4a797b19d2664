#!/usr/bin/env python
"""Engines side by side on the same prompts: plain decode tok/s and n-gram speedup over each
engine's own plain decoding, for every installed backend (torch fp32, with and without packed
verify weights, and packed without padding 2-3 position passes; llama.cpp when the llamacpp extra
is installed), interleaved per prompt so machine
load drifts cancel. Greedy.

Speedups are goodput ratios (Σ emitted / Σ round ms) with a 95% bootstrap interval over prompts,
from specmon.metrics, as everywhere else. "= plain" counts prompts whose speculative output is
token-identical to the same engine's plain output.

    python scripts/bench_engines.py --tokens 64 --draft-len 4 --threads 2 --reps 1

`--reference BIN` adds llama.cpp's own plain greedy decode with no Python in the loop, interleaved
with the engines on the same GGUF, prompt (the chat-formatted text the engines decode), token
budget and threads: BIN is scripts/llamacpp_reference.cpp built against the library that
llama-cpp-python installed, with the headers of the same version's source:

    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d /tmp/lcpp
    tar xzf /tmp/lcpp/llama_cpp_python-0.3.36.tar.gz -C /tmp/lcpp
    SRC=/tmp/lcpp/llama_cpp_python-0.3.36/vendor/llama.cpp LIB=.venv/lib/python3.11/site-packages/llama_cpp/lib
    g++ -O2 -std=c++17 scripts/llamacpp_reference.cpp -I$SRC/include -I$SRC/ggml/include \
        -L$LIB -lllama -lggml -lggml-base -Wl,-rpath,$LIB -o /tmp/llamacpp_reference

It gives two rows: "C loop" (wall time per token after the first: decode and argmax, what the
engines' decode ms count) and "C decode" (llama_decode alone, a figure no loop reaches). The C
loop's "= plain" counts prompts whose greedy text is specmon's plain text through llama.cpp. Extra
buffer types (weight repacking) follow specmon's choice: off where the build has AMX kernels and the CPU runs them.
"""

from __future__ import annotations

import argparse
import itertools
import re
import subprocess
import sys
from collections import defaultdict

import msgspec

from specmon.backends.profiles import DrafterSpec, load_profile
from specmon.engine.draft_len import FixedDraftLen
from specmon.engine.drafters import NgramDrafter, NoDrafter
from specmon.engine.prompts import builtin_suite
from specmon.engine.rounds import RoundContext, decode_prompt
from specmon.errors import SpecmonError
from specmon.events.schema import Sampling
from specmon.metrics.format import fmt
from specmon.metrics.interval import PromptTotals, speedup_estimate

# name -> (profile, keys replaced in it): torch with and without packed verify weights, packed but
# with 2-3 position passes never padded, llama.cpp
ENGINES = {"torch-fp32": ("smollm2-cpu", {}), "torch-nopack": ("smollm2-cpu", {"packed_rows": 0}),
           "torch-nopad": ("smollm2-cpu", {"pad_from": 4}), "llamacpp": ("smollm2-llamacpp", {})}


def load_engines(names: list[str]) -> dict:
    from specmon.backends.loader import load_pair

    pairs = {}
    for name in names:
        try:
            profile, changes = ENGINES[name]
            pairs[name] = load_pair(msgspec.structs.replace(load_profile(profile), **changes), DrafterSpec(kind="none"))
        except SpecmonError as exc:
            print(f"{name}: skipped ({exc})", file=sys.stderr)
    return pairs


def decode(pair, tokens, drafter, k, n_new):
    ctx = RoundContext("bench", "p", "c", itertools.count())
    return decode_prompt(pair.target, drafter, tokens, FixedDraftLen(k), Sampling(), n_new, ctx, lambda e: None)


REFERENCE_LINE = re.compile(r"decoded (\d+) tokens: loop ([\d.]+) ms, llama_decode ([\d.]+) ms\ntokens:([\d ]*)")


def reference_decode(binary: str, gguf: str, text: str, n_new: int, threads: int) -> tuple[dict, list[int]]:
    """(tokens, ms) of llama.cpp's own plain decode after the first token: the "loop" (with argmax)
    and "decode" (llama_decode alone); and the token ids it generated."""
    from specmon.backends.llamacpp_loader import import_llama_cpp, use_extra_bufts

    extra = "1" if use_extra_bufts(import_llama_cpp()) else "0"
    done = subprocess.run([binary, gguf, str(n_new), str(threads), extra, text], capture_output=True, text=True,
                          timeout=600)
    found = REFERENCE_LINE.search(done.stdout)
    if done.returncode != 0 or not found:
        raise SystemExit(f"{binary}: no timing line (exit {done.returncode}): {done.stderr[-300:]}")
    tokens = int(found.group(1))
    timed = {"loop": (tokens, float(found.group(2))), "decode": (tokens, float(found.group(3)))}
    return timed, [int(t) for t in found.group(4).split()]


def reference_turn(results: dict, pair, prompt, n_new: int, reference: tuple[str, str, int]) -> list[int]:
    """llama.cpp's own loop on the chat-formatted prompt the engines decode; its rows in `results`;
    returns its greedy output."""
    text = pair.tokenizer.decode(pair.tokenizer.encode_chat(prompt.text))
    timed, generated = reference_decode(*reference[:2], text, n_new, reference[2])
    for kind, (tokens, ms) in timed.items():
        cell = results.setdefault(f"C {kind}", {"plain": defaultdict(lambda: [0, 0.0])})["plain"][prompt.id]
        cell[0] += tokens
        cell[1] += ms
    return generated


def run(pairs: dict, prompts, reps: int, n_new: int, k: int, reference: tuple[str, str, int] | None = None) -> dict:
    """results[engine][mode] = {prompt id: (emitted, ms)}, summed over reps; plus identity counts."""
    results = {name: {"plain": defaultdict(lambda: [0, 0.0]), "ngram": defaultdict(lambda: [0, 0.0])} for name in pairs}
    same = {name: [0, 0] for name in pairs}
    names = list(pairs)
    tokenizing = next(iter(pairs.values()))  # the pair whose tokenizer renders the reference's prompt
    for rep, (i, prompt) in itertools.product(range(reps), enumerate(prompts)):
        order = names if (i + rep) % 2 == 0 else names[::-1]  # alternate which engine goes first
        if reference and (i + rep) % 2 == 0:  # llama.cpp's own loop: first, then last, in turn
            own = reference_turn(results, tokenizing, prompt, n_new, reference)
        plain_outs = {}
        for name in order:
            pair = pairs[name]
            tokens = pair.tokenizer.encode_chat(prompt.text)
            for mode in (("plain", "ngram") if i % 2 == 0 else ("ngram", "plain")):
                drafter, draft_len = (NoDrafter(), 0) if mode == "plain" else (NgramDrafter(), k)
                done = decode(pair, tokens, drafter, draft_len, n_new)
                cell = results[name][mode][prompt.id]
                cell[0] += len(done.generated)
                cell[1] += done.decode_ms
                if mode == "plain":
                    plain_out = done.generated
                else:
                    spec_out = done.generated
            same[name][0] += plain_out == spec_out
            same[name][1] += 1
            plain_outs[name] = plain_out
        if reference and (i + rep) % 2 == 1:
            own = reference_turn(results, tokenizing, prompt, n_new, reference)
        if reference and "llamacpp" in plain_outs:  # llama.cpp's own greedy text against specmon's through it
            matched = same.setdefault("C loop", [0, 0])
            matched[0] += plain_outs["llamacpp"][:len(own)] == own  # it stops at any end-of-generation token
            matched[1] += 1
        print(f"rep {rep} prompt {prompt.id} done", file=sys.stderr, flush=True)
    return results, same


def totals(cells: dict, ids) -> PromptTotals:
    return PromptTotals({p: cells[p][0] for p in ids}, {p: cells[p][1] for p in ids})


def tok_s(t: PromptTotals) -> float:
    return 1e3 * sum(t.emitted.values()) / sum(t.ms.values())


def table(results, same, prompts, k: int) -> None:
    ids = [p.id for p in prompts]
    base = next(iter(results))
    print(f"\nall {len(ids)} prompts; plain tok/s = Σ tokens / Σ decode ms; speedup = n-gram k={k} goodput / "
          "plain goodput [95% interval over prompts]")
    print(f"{'engine':<12} {'plain tok/s':>11} {'vs ' + base:>15} {'n-gram k=' + str(k) + ' speedup':>24} {'= plain':>8}")
    base_tps = tok_s(totals(results[base]["plain"], ids))
    for name, modes in results.items():
        plain = totals(modes["plain"], ids)
        if "ngram" not in modes:  # the reference decodes plainly only; = plain: its text is specmon's llama.cpp plain
            match = f"{same[name][0]:>3}/{same[name][1]}" if name in same else ""
            print(f"{name:<12} {tok_s(plain):>11.1f} {tok_s(plain) / base_tps:>14.2f}x {'':>24} {match:>8}")
            continue
        est = speedup_estimate(totals(modes["ngram"], ids), plain)
        interval = f"[{fmt(est.low)}, {fmt(est.high)}]"
        print(f"{name:<12} {tok_s(plain):>11.1f} {tok_s(plain) / base_tps:>14.2f}x {fmt(est.ratio):>8}x {interval:>14} "
              f"{same[name][0]:>3}/{same[name][1]}")
    print(f"\nn-gram k={k} speedup by class (each engine over its own plain)")
    classes = list(dict.fromkeys(p.prompt_class for p in prompts))
    print(f"{'class':<12} " + " ".join(f"{name:>24}" for name, m in results.items() if "ngram" in m))
    for cls in classes:
        cls_ids = [p.id for p in prompts if p.prompt_class == cls]
        cells = []
        for modes in (m for m in results.values() if "ngram" in m):
            est = speedup_estimate(totals(modes["ngram"], cls_ids), totals(modes["plain"], cls_ids))
            cells.append(f"{fmt(est.ratio)}x ({est.verdict})")
        print(f"{cls:<12} " + " ".join(f"{c:>24}" for c in cells))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default=",".join(ENGINES), help=f"comma-separated, of {', '.join(ENGINES)}")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per prompt")
    parser.add_argument("--draft-len", type=int, default=4)
    parser.add_argument("--threads", type=int, default=0, help="CPU threads for every engine (0: torch's default)")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--classes", default=None, help="comma-separated built-in classes (default: all)")
    parser.add_argument("--reference", help="scripts/llamacpp_reference.cpp, built as above")
    args = parser.parse_args()
    if args.tokens < 2:
        parser.error("--tokens must be at least 2 (the reference times the tokens after its first)")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)  # the llama.cpp backend takes the same count
    pairs = load_engines([n.strip() for n in args.engines.split(",") if n.strip()])
    if not pairs:
        print("no engine could be loaded", file=sys.stderr)
        return 1
    prompts = builtin_suite(args.classes.split(",") if args.classes else None)
    for pair in pairs.values():  # warm-up: first calls allocate
        decode(pair, pair.tokenizer.encode_chat("Hello"), NoDrafter(), 0, 8)
    print(f"threads {torch.get_num_threads()}, {len(prompts)} prompts x {args.reps} reps, {args.tokens} new tokens, "
          f"greedy, engines interleaved per prompt", file=sys.stderr)
    reference = None
    if args.reference:
        from specmon.backends.loader import resolve_model_path

        profile = load_profile(ENGINES["llamacpp"][0])
        reference = (args.reference, str(resolve_model_path(profile.target, profile)), torch.get_num_threads())
    results, same = run(pairs, prompts, args.reps, args.tokens, args.draft_len, reference)
    table(results, same, prompts, args.draft_len)
    return 0


if __name__ == "__main__":
    sys.exit(main())
