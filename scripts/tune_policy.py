#!/usr/bin/env python
"""Tune a policy without timing noise: replay the greedy texts of a `specmon bench policy` log
under a policy, and under every fixed k, with round costs from a table.

Greedy decoding emits the same tokens at every k, so what each round proposes (the n-gram
drafter with the class's confidence) and accepts is exact; only its time is modelled: a round
that proposes L tokens costs cost(L) plain steps (cost(0) = 1), from `--costs` (measure them with
scripts/bench_verify_cost.py) or, without it, the log's own rounds (mean round ms over its prompt's
median plain round, per L). The real PolicyEngine plans, probes, re-measures and decides on these
rounds, so what it prints is what the policy would do were timing exact: a tool for choosing
defaults on the tuning half; quote measured figures (`specmon bench policy`) on the test half.

    python scripts/tune_policy.py logs/BENCH.specmon --half tune --policy my.toml \\
        --costs 1.17,1.23,1.55,1.55,1.58,1.60,1.50,1.58 --pad-from 4

`--pad-from N` replays a target whose verify passes of N..9 positions run as 9 packed rows, as
the embedded model's do: a confident draft fills those rows past its match, as it does live.
By default it is the log's own (its session header records the pad_from measured at load); 0
replays drafts that stop at their match.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from specmon.backends.loader import cached_tokenizer
from specmon.backends.profiles import load_profile, resolve_model_path
from specmon.engine.drafters import NgramDrafter
from specmon.engine.prompts import load_prompts
from specmon.events.log import read_log
from specmon.events.schema import (BENCH_FIXED_RULE, PromptFinished, PromptStarted, RoundVerified, Sampling,
                                   SessionStarted)
from specmon.policy.engine import PolicyEngine
from specmon.policy.schema import load_policy
from specmon.sched.bench import prompt_half, shipped_prompts

STEP_MS = 40.0  # one plain step: any constant gives the same ratios


def plain_texts(log: Path) -> tuple[dict[str, list[int]], dict[int, float]]:
    """Each prompt's plain greedy tokens, and cost(L) fitted on the log's rounds."""
    texts, plain_ms, spec = {}, defaultdict(list), []
    opened = None
    for ev in read_log(log):
        if isinstance(ev, PromptStarted):
            opened = ev
        elif isinstance(ev, PromptFinished) and opened and opened.class_rule == f"{BENCH_FIXED_RULE}0":
            texts[ev.prompt_id] = ev.generated
        elif isinstance(ev, RoundVerified):
            ms = ev.draft_ms + ev.verify_ms + ev.overhead_ms
            (plain_ms[ev.prompt_id].append(ms) if ev.draft_len == 0 else spec.append((ev.prompt_id, len(ev.proposed), ms)))
    step = {p: statistics.median(v) for p, v in plain_ms.items()}
    by_len = defaultdict(list)
    for prompt_id, proposed, ms in spec:
        if prompt_id in step:
            by_len[proposed].append(ms / step[prompt_id])
    return texts, {n: statistics.mean(v) for n, v in by_len.items() if len(v) >= 5}


def logged_pad_from(log: Path) -> int:
    """The pad_from the logged session measured at load (0: no packed weights, or an older log)."""
    started = next((ev for ev in read_log(log) if isinstance(ev, SessionStarted)), None)
    return int(started.host.get("pad_from", 0)) if started else 0


def cost_of(costs: dict[int, float]):
    """cost(L) in plain steps, interpolated between measured L (held at the ends)."""
    known = sorted(costs)

    def cost(n: int) -> float:
        if n == 0:
            return 1.0
        if n in costs:
            return costs[n]
        lower = max((x for x in known if x < n), default=known[0])
        upper = min((x for x in known if x > n), default=known[-1])
        if lower == upper:
            return costs[lower]
        return costs[lower] + (costs[upper] - costs[lower]) * (n - lower) / (upper - lower)

    return cost


class Replay:
    """Decode a prompt's known greedy text round by round, k from a callable; rounds go to `after`."""

    def __init__(self, tokenizer, texts: dict[str, list[int]], cost, pad_from: int = 0, packed_rows: int = 9):
        self.tokenizer, self.texts, self.cost = tokenizer, texts, cost
        padded = (lambda n, start: packed_rows if pad_from <= n <= packed_rows else n) if pad_from else None
        self.drafter = NgramDrafter(verify_rows=padded)
        self.round_id = 0

    def run(self, prompt, name: str, ngram, next_k, after=None) -> tuple[int, float]:
        self.drafter.confident(*ngram) if ngram else self.drafter.confident(0)
        ids, text, out, ms = self.tokenizer.encode_chat(prompt.text), self.texts[prompt.id], [], 0.0
        index = 0  # the round's place in this prompt run: a k move pairs a probe round with the next
        while len(out) < len(text):
            k = next_k()
            proposal = self.drafter.propose(ids + out, k, Sampling(), None) if k else None
            proposed = proposal.tokens if proposal else []
            rest = text[len(out):]
            accepted = next((i for i, t in enumerate(proposed) if i >= len(rest) or rest[i] != t), len(proposed))
            emitted = rest[:accepted + 1]
            round_ms = STEP_MS * self.cost(len(proposed))
            out, ms = out + emitted, ms + round_ms
            if after is not None:
                after(RoundVerified(
                    session_id="tune", t=0.0, round_id=self.round_id, prompt_id=prompt.id, prompt_class=name,
                    round_index=index, draft_len=k, proposed=proposed, accepted=accepted,
                    rejection_pos=None if accepted == len(proposed) else accepted, emitted=emitted, draft_ms=0.0,
                    verify_ms=round_ms, overhead_ms=0.0, target_probs=[], alpha_hat=None, margins=[],
                    sampling=Sampling(), mem_bytes=0, matched=proposal.matched if proposal else 0))
            self.round_id += 1
            index += 1
        return len(out), ms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", type=Path, help="a `specmon bench policy` log (its plain runs give the texts)")
    parser.add_argument("--policy", default="default")
    parser.add_argument("--prompts", default="bench", help="the prompt set the log ran (default: the shipped one)")
    parser.add_argument("--half", choices=("tune", "test"))
    parser.add_argument("--ks", default="0,2,4,7,8")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--costs", help="cost of a round proposing L = 1, 2, ... tokens, in plain steps")
    parser.add_argument("--pad-from", type=int, choices=(0, 2, 3, 4),
                        help="verify passes of this many positions or more run as 9 padded rows (0: none; "
                             "default: as the log's session header says)")
    args = parser.parse_args()
    texts, fitted = plain_texts(args.log)
    if args.pad_from is None:
        args.pad_from = logged_pad_from(args.log)
    print(f"pad_from {args.pad_from}: a confident draft fills a padded verify pass" if args.pad_from
          else "no padded verify passes: a confident draft stops at its match")
    costs = {i + 1: float(x) for i, x in enumerate(args.costs.split(","))} if args.costs else fitted
    if not costs:
        print("no speculative rounds in the log to fit costs on; give --costs", file=sys.stderr)
        return 1
    print("cost of L proposed tokens, plain steps: " + " ".join(f"{n}:{c:.2f}" for n, c in sorted(costs.items())))
    source = shipped_prompts(args.prompts) or Path(args.prompts)
    prompts = [p for p in load_prompts(source) if p.id in texts and (not args.half or prompt_half(p.id) == args.half)]
    profile = load_profile("smollm2-cpu")
    replay = Replay(cached_tokenizer(resolve_model_path(profile.target, profile)), texts, cost_of(costs),
                    args.pad_from)
    engine = PolicyEngine(load_policy(args.policy), "tune")
    ks = [int(k) for k in args.ks.split(",")]
    totals: dict[str, dict] = defaultdict(lambda: defaultdict(lambda: [0, 0.0]))
    for prompt in prompts * args.repeat:
        name = engine.classify(prompt.text, prompt.prompt_class if prompt.prompt_class != "default" else None)[0]
        schedule = engine.start_prompt(name, prompt.id)
        learned, ngram = engine.confidence(name), engine.confidence(name, learned=False)  # fixed k: the file's
        runs = {"auto": replay.run(prompt, name, learned, lambda: engine.round_k(name, schedule),
                                   lambda ev: raised(engine, engine.after_round(ev, schedule), replay.drafter))}
        runs.update({k: replay.run(prompt, name, ngram, lambda k=k: k) for k in ks})
        for key, (emitted, ms) in runs.items():
            totals[name][key][0] += emitted
            totals[name][key][1] += ms
    report(totals, ks, engine.decisions)
    return 0


def raised(engine: PolicyEngine, decision, drafter: NgramDrafter) -> None:
    """As the live session does: a raised min_match drafts from the next round."""
    if decision is not None and decision.match_to and decision.applied:
        drafter.confident(*engine.confidence(decision.prompt_class))


def report(totals: dict, ks: list[int], decisions: int) -> None:
    overall: dict = defaultdict(lambda: [0, 0.0])
    print(f"{'class':<12} " + " ".join(f"{'k=' + str(k):>6}" for k in ks) + f" {'auto':>6} {'auto/best':>12}")
    for name, runs in sorted(totals.items()):
        rate = {key: emitted / ms for key, (emitted, ms) in runs.items()}
        for key, (emitted, ms) in runs.items():
            overall[key][0] += emitted
            overall[key][1] += ms
        best = max(ks, key=rate.get)
        print(f"{name:<12} " + " ".join(f"{rate[k] / rate[0]:>6.3f}" for k in ks)
              + f" {rate['auto'] / rate[0]:>6.3f} {rate['auto'] / rate[best]:>6.3f} (k={best})")
    rate = {key: emitted / ms for key, (emitted, ms) in overall.items()}
    best = max((k for k in ks if k), key=rate.get)
    print(f"goodput over plain per class; auto against the best single k (k={best}) over all classes: "
          f"{rate['auto'] / rate[best]:.3f}; {decisions} decisions")


if __name__ == "__main__":
    sys.exit(main())
