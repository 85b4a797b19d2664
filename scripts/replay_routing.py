#!/usr/bin/env python
"""The proxy's routing rule replayed offline on measured requests, to judge a rule on many request
orders instead of one 25-minute bench run.

`record` sends every prompt of a shipped set, `--cycles` times, straight to two llama-servers on the
embedded GGUF (one drafting by n-gram, one plain), interleaved, and writes each reply's generated
tokens and the server's own decode ms per side as JSON. `replay` feeds the real Router
(specmon.proxy.routing) those replies in `--orders` seeded random orders, each request answered by
the side the Router chose with that prompt's measured reply, and prints per class the routed goodput
over the better side's (Σ tokens / Σ ms, as scripts/bench_routing.py reports it), its spread over the
orders, and how many moves each order made.

    .venv/bin/python scripts/replay_routing.py record --prompts bench --json /tmp/bench-sides.json
    .venv/bin/python scripts/replay_routing.py replay /tmp/bench-sides.json

Figures are printed, never asserted."""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
from pathlib import Path

import httpx
from bench_llama_server import Server, find_server
from bench_proxy import cpu_pressure
from bench_routing import LOSES, PAYS, request

from specmon.backends import modelstore
from specmon.engine.prompts import prompt_set
from specmon.events.schema import RequestTimed
from specmon.policy.schema import load_policy
from specmon.proxy.classes import request_class
from specmon.proxy.routing import PLAIN, SPEC, Router
from specmon.sched.bench import shipped_prompts


def record(args) -> int:
    binary = find_server()
    if binary is None:
        print("no llama-server: bash scripts/setup-llama-server; nothing measured")
        return 0
    prompts = [p for p in prompt_set(shipped_prompts(args.prompts), None) if p.prompt_class in PAYS + LOSES]
    policy = load_policy("default")
    model = modelstore.resolve(modelstore.SMOLLM2.name)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        print(f"host CPU pressure before: {cpu_pressure()}")
        servers = [Server(binary, model, mode, 1, 2048, Path(tmp)) for mode in (args.spec_type, "none")]
        try:
            for s in servers:
                s.wait_ready()
            bases = {SPEC: f"http://127.0.0.1:{servers[0].port}", PLAIN: f"http://127.0.0.1:{servers[1].port}"}
            limits = httpx.Limits(max_keepalive_connections=0)
            with httpx.Client(timeout=600, limits=limits, trust_env=False) as client:
                total = args.cycles * len(prompts)
                for i in range(total):
                    p = prompts[i % len(prompts)]
                    sides = [SPEC, PLAIN] if i % 2 == 0 else [PLAIN, SPEC]
                    got = {side: request(client, bases[side], p.text, args.max_tokens) for side in sides}
                    body = {"messages": [{"role": "user", "content": p.text}]}
                    name = request_class(policy, "chat", body, None)[0]
                    rows.append({"prompt": p.id, "class": name, **{s: [got[s]["n"], got[s]["ms"]] for s in got}})
                    print(f"\r{i + 1}/{total} prompts", end="", file=sys.stderr, flush=True)
            print(file=sys.stderr)
        finally:
            for s in servers:
                s.stop()
        print(f"host CPU pressure after:  {cpu_pressure()}")
    args.json.write_text(json.dumps({"prompts": args.prompts, "spec_type": args.spec_type, "rows": rows}) + "\n")
    print(f"{len(rows)} prompts' replies from each side in {args.json}")
    return 0


def replayed(rows: list[dict], policy_name: str, seed: int, repeat: int) -> dict[str, dict]:
    """One order of the rows (each `repeat` times, shuffled by `seed`) through a fresh Router: per class
    the tokens and ms each path would have taken, and the moves made."""
    router = Router(load_policy(policy_name), "sim", has_plain=True)
    order = [r for r in rows for _ in range(repeat)]
    random.Random(seed).shuffle(order)
    out: dict[str, dict] = {}
    for i, row in enumerate(order):
        c = out.setdefault(row["class"], _empty())
        side = router.side(row["class"])
        n, ms = row[side]
        for path, (pn, pms) in ((SPEC, row[SPEC]), (PLAIN, row[PLAIN]), ("routed", (n, ms))):
            c[path][0] += pn
            c[path][1] += pms
        ev = RequestTimed(
            session_id="sim", t=float(i), request_id=str(i), prompt_class=row["class"], class_rule="",
            upstream=side, endpoint="chat", status=200, stream=True, predicted_n=n, predicted_ms=ms,
        )  # fmt: skip
        for d in router.observe(ev):
            out.setdefault(d.prompt_class, _empty())["moves"] += 1
    return out


def _empty() -> dict:
    return {SPEC: [0, 0.0], PLAIN: [0, 0.0], "routed": [0, 0.0], "moves": 0}


def replay(args) -> int:
    rows = json.loads(args.json.read_text())["rows"]
    runs = [replayed(rows, args.policy, seed, args.repeat) for seed in range(args.orders)]
    for run in runs:  # all traffic: each path's sums over every class (a class with none was only moved)
        for name in [c for c in run if not run[c][SPEC][1]]:
            del run[name]
        run["all"] = {
            path: [sum(run[c][path][i] for c in list(run)) for i in (0, 1)] for path in (SPEC, PLAIN, "routed")
        }
        run["all"]["moves"] = sum(run[c]["moves"] for c in list(run) if c != "all")
    for name in runs[0]:
        ratios, moves = [], []
        for run in runs:
            ratios.append(_over_better(run[name]))
            moves.append(run[name]["moves"])
        c = runs[0][name]
        better = max((SPEC, PLAIN), key=lambda s: c[s][0] / c[s][1])
        spread = sorted(ratios)
        print(
            f"{name:12} {sum(r['class'] == name or name == 'all' for r in rows) * args.repeat:4} requests, better {better:5} "
            f"(spec/plain {(c[SPEC][0] / c[SPEC][1]) / (c[PLAIN][0] / c[PLAIN][1]):.3f}): routed/better mean "
            f"{statistics.mean(ratios):.3f}, 5th pct {spread[len(spread) // 20]:.3f}, min {spread[0]:.3f}; "
            f"moves mean {statistics.mean(moves):.1f}"
        )
    met = [all(_over_better(run[c]) >= args.bar for c in run if c != "all") for run in runs]
    print(f"orders in which every class kept at least {args.bar}x the better side: {sum(met)} of {len(runs)}")
    return 0


def _over_better(c: dict) -> float:
    good = {path: c[path][0] / c[path][1] for path in (SPEC, PLAIN, "routed")}
    return good["routed"] / max(good[SPEC], good[PLAIN])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="measure each prompt on both sides")
    rec.add_argument("--prompts", default="bench", help="a shipped prompt set (default bench; holdout is the judge)")
    rec.add_argument("--cycles", type=int, default=2, help="times each prompt is sent to each side (default 2)")
    rec.add_argument("--max-tokens", type=int, default=64, help="tokens a request (default 64)")
    rec.add_argument("--spec-type", default="ngram-simple", help="the drafting server's --spec-type")
    rec.add_argument("--json", type=Path, required=True, help="where the replies go")
    rep = sub.add_parser("replay", help="route recorded replies in many orders")
    rep.add_argument("json", type=Path, help="what record wrote")
    rep.add_argument("--orders", type=int, default=200, help="random request orders (default 200)")
    rep.add_argument("--repeat", type=int, default=1, help="times each recorded reply is sent in an order")
    rep.add_argument("--bar", type=float, default=0.97, help="routed/better every class must keep (default 0.97)")
    rep.add_argument("--policy", default="default", help="a shipped policy or a TOML file (default: default)")
    args = parser.parse_args()
    return record(args) if args.command == "record" else replay(args)


if __name__ == "__main__":
    sys.exit(main())
