"""`specmon bench engines`: engines side by side on the same prompts, each decoding plainly and with
the n-gram drafter through its own session driver, interleaved per prompt (alternating which engine
and which mode goes first) so machine load drifts cancel. Greedy.

Speedups are goodput ratios (Σ emitted / Σ round ms) with a 95% bootstrap interval over prompts,
from specmon.metrics, as everywhere else. "identical" counts the prompts whose speculative output is
token-identical to the same engine's plain output.

An optional reference is llama.cpp's own plain greedy loop with no Python in it (a binary built
from scripts/llamacpp_reference.cpp), on the same GGUF, chat-formatted prompt, budget and threads:
"C loop" (decode and argmax: what the engines' decode ms count) and "C decode" (llama_decode alone)."""

from __future__ import annotations

import itertools
import re
import subprocess
from collections import defaultdict
from typing import Callable, Sequence

import msgspec

from specmon.backends.profiles import DrafterSpec, load_profile
from specmon.engine.draft_len import FixedDraftLen
from specmon.engine.drafters import NgramDrafter, NoDrafter
from specmon.engine.driver import UNCHECKED, SessionDriver
from specmon.engine.prompts import Prompt
from specmon.errors import SpecmonError
from specmon.events.schema import Sampling
from specmon.metrics.interval import PromptTotals, speedup_estimate
from specmon.metrics.rates import goodput, speedup
from specmon.sched.turns import rotated

# name -> (which profile, keys replaced in it): torch with and without packed verify weights, packed
# with 2-3 position passes never padded; llama.cpp
ENGINES = {
    "torch-fp32": ("torch", {}),
    "torch-nopack": ("torch", {"packed_rows": 0}),
    "torch-nopad": ("torch", {"pad_from": 4}),
    "llamacpp": ("llamacpp", {}),
}
MODES = ("plain", "ngram")
GREEDY = Sampling()
WARM_UP = Prompt("warm-up", "Hello", "warm-up")
REFERENCE_LINE = re.compile(r"decoded (\d+) tokens: loop ([\d.]+) ms, llama_decode ([\d.]+) ms\ntokens:([\d ]*)")


def engine_names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in ENGINES]
    if unknown or not names:
        raise SpecmonError(f"--engines {text!r}: expected comma-separated names of {', '.join(ENGINES)}")
    return names


def load_engines(names: Sequence[str], profiles: dict[str, str], skipped: Callable[[str, str], None]) -> dict:
    """name -> a session driver on the engine's target; an engine that cannot load (llama.cpp not
    installed, a model not pulled) is skipped, with its reason."""
    from specmon.backends.loader import load_pair  # torch: only once every input is checked

    drivers = {}
    for name in names:
        which, changes = ENGINES[name]
        try:
            pair = load_pair(
                msgspec.structs.replace(load_profile(profiles[which]), **changes), DrafterSpec(kind="none")
            )
        except SpecmonError as exc:
            skipped(name, str(exc))
            continue
        # engines are compared on their decodes' own totals: no log
        drivers[name] = SessionDriver(f"bench-engines-{name}", pair.target, pair.tokenizer, lambda event: None, 0.0)
    return drivers


def decode(driver: SessionDriver, prompt: Prompt, mode: str, k: int, n_new: int):
    drafter, draft_len = (NoDrafter(), 0) if mode == "plain" else (NgramDrafter(), k)  # the plain lookup
    done = driver.decode(prompt, drafter, FixedDraftLen(draft_len), GREEDY, n_new)
    driver.finish(done, UNCHECKED)
    return done.run


def warm_up(drivers: dict) -> None:
    """First calls allocate: one short decode per engine before anything is timed."""
    for driver in drivers.values():
        decode(driver, WARM_UP, "plain", 0, 8)


class Bench:
    """cells[engine][mode][prompt id] = [emitted, ms], summed over reps; same[engine] = [identical, decodes]."""

    def __init__(self, names: Sequence[str]):
        self.cells = {name: {mode: defaultdict(lambda: [0, 0.0]) for mode in MODES} for name in names}
        self.same = {name: [0, 0] for name in names}

    def add(self, name: str, mode: str, prompt_id: str, emitted: int, ms: float) -> None:
        cell = self.cells.setdefault(name, {"plain": defaultdict(lambda: [0, 0.0])})[mode][prompt_id]
        cell[0] += emitted
        cell[1] += ms


def run(
    drivers: dict,
    prompts: Sequence[Prompt],
    reps: int,
    n_new: int,
    k: int,
    reference: tuple[str, str, int] | None = None,
    on_prompt: Callable[[int], None] | None = None,
) -> Bench:
    bench, names = Bench(list(drivers)), list(drivers)
    tokenizer = next(iter(drivers.values())).tokenizer  # renders the reference's prompt
    for step, (rep, (i, prompt)) in enumerate(itertools.product(range(reps), enumerate(prompts))):
        even = (i + rep) % 2 == 0
        own = reference_turn(bench, tokenizer, prompt, n_new, reference) if reference and even else None
        plain_outs = {}
        for name in rotated(names, i + rep):  # each engine goes first in turn
            plain_outs[name] = _engine_turn(bench, name, drivers[name], prompt, n_new, k, i)
        if reference and not even:  # llama.cpp's own loop: first, then last, in turn
            own = reference_turn(bench, tokenizer, prompt, n_new, reference)
        if own is not None and "llamacpp" in plain_outs:  # its greedy text against specmon's through llama.cpp
            matched = bench.same.setdefault("C loop", [0, 0])
            matched[0] += plain_outs["llamacpp"][: len(own)] == own  # it stops at any end-of-generation token
            matched[1] += 1
        if on_prompt:
            on_prompt(step + 1)
    return bench


def _engine_turn(
    bench: Bench, name: str, driver: SessionDriver, prompt: Prompt, n_new: int, k: int, index: int
) -> list[int]:
    """One prompt on one engine, plain and n-gram (in turn first, by the prompt's index); returns the plain output."""
    outs = {}
    for mode in rotated(MODES, index):
        done = decode(driver, prompt, mode, k, n_new)
        bench.add(name, mode, prompt.id, len(done.generated), done.decode_ms)
        outs[mode] = done.generated
    bench.same[name][0] += outs["plain"] == outs["ngram"]
    bench.same[name][1] += 1
    return outs["plain"]


def reference_turn(bench: Bench, tokenizer, prompt: Prompt, n_new: int, reference: tuple[str, str, int]) -> list[int]:
    """llama.cpp's own loop on the chat-formatted prompt, timed into `bench` as "C loop" and "C decode";
    returns its greedy output."""
    from specmon.backends.llamacpp_loader import import_llama_cpp, use_extra_bufts

    binary, gguf, threads = reference
    text = tokenizer.decode(tokenizer.encode_chat(prompt.text))
    extra = "1" if use_extra_bufts(import_llama_cpp()) else "0"
    try:
        done = subprocess.run(
            [binary, gguf, str(n_new), str(threads), extra, text], capture_output=True, text=True, timeout=600
        )
    except OSError as exc:
        raise SpecmonError(f"--reference {binary}: cannot run it ({exc.strerror})") from None
    found = REFERENCE_LINE.search(done.stdout)
    if done.returncode != 0 or not found:
        last = (done.stderr.strip().splitlines() or [""])[-1][-200:]
        raise SpecmonError(f"--reference {binary}: no timing line (exit {done.returncode}): {last}")
    tokens = int(found.group(1))
    bench.add("C loop", "plain", prompt.id, tokens, float(found.group(2)))
    bench.add("C decode", "plain", prompt.id, tokens, float(found.group(3)))
    return [int(t) for t in found.group(4).split()]


def _totals(cells: dict, ids: Sequence[str]) -> PromptTotals:
    return PromptTotals({p: cells[p][0] for p in ids}, {p: cells[p][1] for p in ids})


def _tok_s(t: PromptTotals) -> float | None:
    rate = goodput(sum(t.emitted.values()), sum(t.ms.values()))
    return rate * 1e3 if rate is not None else None


def figures(bench: Bench, prompts: Sequence[Prompt]) -> dict:
    """Per engine: plain tok/s (and against the first engine's), the n-gram speedup over its own plain
    with its 95% interval over prompts, and identical outputs; per class, each engine's speedup."""
    ids = [p.id for p in prompts]
    by_class = defaultdict(list)
    for p in prompts:
        by_class[p.prompt_class].append(p.id)
    base = _tok_s(_totals(next(iter(bench.cells.values()))["plain"], ids))
    engines, classes = {}, {c: {} for c in by_class}
    for name, modes in bench.cells.items():
        plain = _tok_s(_totals(modes["plain"], ids))
        entry = engines[name] = {"plain_tok_s": plain, "vs_first": speedup(plain, base), "prompts": len(ids)}
        if name in bench.same:  # a decode pair per prompt and rep (C loop: its text against llama.cpp's plain)
            entry["identical"], entry["compared"] = bench.same[name]
        if "ngram" not in modes:
            continue
        est = speedup_estimate(_totals(modes["ngram"], ids), _totals(modes["plain"], ids))
        entry.update(
            ngram_speedup=est.ratio, interval=None if est.low is None else [est.low, est.high], verdict=est.verdict
        )
        for cls, cls_ids in by_class.items():
            est = speedup_estimate(_totals(modes["ngram"], cls_ids), _totals(modes["plain"], cls_ids))
            classes[cls][name] = {"speedup": est.ratio, "verdict": est.verdict}
    return {"engines": engines, "classes": classes}
