#!/usr/bin/env python
"""The policy applied by routing: two llama-servers on the embedded GGUF, one drafting by n-gram and
one plain, behind `specmon proxy --plain-upstream` (its own process, routing on), against the same
held-out prompts sent directly to each server. Per prompt the three requests are interleaved and
their order rotates. Per class (as the proxy classified it): each path's decode goodput (Σ tokens /
Σ the server's own predicted_ms), the proxy's over the better server's, how many of its requests
went to the worse side (learning and exploring), its decode against the same prompts sent direct to the
server that answered each (the proxy's own cost, apart from routing), and the time to first byte the proxy adds (each
proxied request against the direct request of the same prompt to the server it was routed to).

    bash scripts/setup-llama-server
    .venv/bin/python scripts/bench_routing.py --cycles 6

Without a llama-server ($LLAMA_SERVER, .venv/bin or PATH) it prints why and exits 0. Figures are
printed, never asserted."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from bench_llama_server import Server, find_server
from bench_proxy import cpu_pressure, percentile, proxy

from specmon.backends import modelstore
from specmon.engine.prompts import prompt_set
from specmon.policy.classify import classify
from specmon.policy.schema import load_policy
from specmon.sched.bench import shipped_prompts
from specmon.events.log import read_log
from specmon.events.schema import Decision, RequestTimed

# the holdout set's labels by what the shipped policy makes of them: prompts that give text to copy, and not
PAYS = ("rewrite", "summarize", "reformat", "code-edit", "extraction", "context-qa")
LOSES = ("chat", "qa", "math", "code-new")


def request(client: httpx.Client, base: str, prompt: str, max_tokens: int) -> dict:
    """One streamed chat request: ms to the first body byte and the server's own timings."""
    body = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "cache_prompt": False,  # each path prefills the prompt itself: no side finds it cached
    }
    start, first, timings = time.perf_counter(), None, None
    with client.stream("POST", f"{base}/v1/chat/completions", json=body) as reply:
        reply.raise_for_status()
        for line in reply.iter_lines():
            first = first or time.perf_counter()
            if line.startswith("data: {") and '"timings"' in line:
                timings = json.loads(line[6:])["timings"]
    return {"ttfb_ms": (first - start) * 1e3, "n": timings["predicted_n"], "ms": timings["predicted_ms"]}


def sent(prompts: list, cycles: int, thin: dict[str, int]) -> list:
    """Every prompt, `cycles` times over, in order; a class in `thin` (as the shipped policy sorts the
    prompts, as the proxy will) only N times in all, spread evenly over the run (a thin class among
    larger ones, #60)."""
    policy = load_policy("default")
    order = [prompts[i % len(prompts)] for i in range(cycles * len(prompts))]
    keep = set(range(len(order)))
    for name, n in thin.items():
        at = [i for i, p in enumerate(order) if classify(policy, p.text)[0] == name]
        if not at:
            raise SystemExit(f"--thin {name}: the shipped policy puts no held-out prompt in that class")
        chosen = {at[round(j * (len(at) - 1) / max(n - 1, 1))] for j in range(min(n, len(at)))}
        keep -= set(at) - chosen
    return [p for i, p in enumerate(order) if i in keep]


def measure(spec: str, plain: str, proxied: str, order: list, max_tokens: int) -> list[dict]:
    """Each prompt of `order` to each of the three paths, their order rotating."""
    out = []
    limits = httpx.Limits(max_keepalive_connections=0)
    with httpx.Client(timeout=600, limits=limits, trust_env=False) as client:
        paths = [("spec", spec), ("plain", plain), ("proxy", proxied)]
        total = len(order)
        for i, p in enumerate(order):
            turn = paths[i % 3 :] + paths[: i % 3]
            got = {name: request(client, base, p.text, max_tokens) for name, base in turn}
            out.append({"prompt": p.id, "label": p.prompt_class, **got})
            print(f"\r{i + 1}/{total} prompts", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return out


def figures(rows: list[dict], log: Path) -> dict:
    """Per class, from the rows and the proxy's log (its RequestTimed in request order)."""
    events = list(read_log(log))
    routed = [e for e in events if isinstance(e, RequestTimed)]
    decisions = [e for e in events if isinstance(e, Decision)]
    classes: dict[str, dict] = {}
    for row, ev in zip(rows, routed):
        c = classes.setdefault(ev.prompt_class, {"rows": [], "sides": []})
        c["rows"].append(row)
        c["sides"].append(ev.upstream)
    out = {"classes": {}, "decisions": [f"{d.prompt_class}: {d.reason}" for d in decisions]}
    out["all"] = all_traffic(classes)
    for name, c in classes.items():
        good = {
            path: sum(r[path]["n"] for r in c["rows"]) / sum(r[path]["ms"] for r in c["rows"]) * 1e3
            for path in ("spec", "plain", "proxy")
        }
        better = max(("spec", "plain"), key=good.get)
        added = [r["proxy"]["ttfb_ms"] - r[side]["ttfb_ms"] for r, side in zip(c["rows"], c["sides"])]
        # the proxied requests' decode against the same prompt sent direct to the server that answered them:
        # the proxy's own cost to decoding, apart from where it routed
        same = sum(r[side]["n"] for r, side in zip(c["rows"], c["sides"])) / sum(
            r[side]["ms"] for r, side in zip(c["rows"], c["sides"])
        )
        out["classes"][name] = {
            "requests": len(c["rows"]),
            "tok_s": good,
            "better": better,
            "proxy_over_better": good["proxy"] / good[better],
            "to_worse_side": sum(side != better for side in c["sides"]),
            "proxy_over_same_server": good["proxy"] / (same * 1e3),
            "added_ttfb_p50_ms": statistics.median(added),
            "added_ttfb_p99_ms": percentile(added, 0.99),
        }
    return out


def all_traffic(classes: dict[str, dict]) -> dict:
    """Every request together: the proxy's goodput over each class sent to its better server (what a
    router that knew could do) and over the better single server."""

    def rate(pairs) -> float:
        pairs = list(pairs)
        return sum(n for n, _ in pairs) / sum(ms for _, ms in pairs) * 1e3

    rows = [r for c in classes.values() for r in c["rows"]]
    side = {p: rate((r[p]["n"], r[p]["ms"]) for r in rows) for p in ("spec", "plain", "proxy")}
    oracle = []
    for c in classes.values():
        better = max(("spec", "plain"), key=lambda p: rate((r[p]["n"], r[p]["ms"]) for r in c["rows"]))
        oracle += [(r[better]["n"], r[better]["ms"]) for r in c["rows"]]
    return {
        "requests": len(rows),
        "proxy_over_class_better": side["proxy"] / rate(oracle),
        "proxy_over_better_server": side["proxy"] / max(side["spec"], side["plain"]),
    }


def report(found: dict) -> None:
    for name, c in found["classes"].items():
        t = c["tok_s"]
        print(
            f"{name}: {c['requests']} requests; tok/s spec {t['spec']:.1f}, plain {t['plain']:.1f}, through the "
            f"proxy {t['proxy']:.1f} = {c['proxy_over_better']:.3f}x the better ({c['better']}); "
            f"{c['to_worse_side']} sent to the other side; {c['proxy_over_same_server']:.3f}x the same requests direct "
            f"to the server that answered them; proxy adds {c['added_ttfb_p50_ms']:.1f} ms "
            f"to first byte (p50), {c['added_ttfb_p99_ms']:.1f} ms (p99)"
        )
    a = found["all"]
    print(
        f"all traffic: {a['requests']} requests; through the proxy {a['proxy_over_class_better']:.3f}x each class at "
        f"its better server, {a['proxy_over_better_server']:.3f}x the better single server"
    )
    for line in found["decisions"]:
        print(f"decision: {line}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=6, help="times each prompt is sent to each path (default 6)")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens a request (default 64)")
    parser.add_argument("--spec-type", default="ngram-simple", help="the drafting server's --spec-type")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="each llama-server's threads (default 1: on 2 cores, 2 each leave the proxy and client none)",
    )
    parser.add_argument(
        "--thin",
        action="append",
        default=[],
        metavar="CLASS=N",
        help="send the held-out prompts the shipped policy puts in CLASS only N times in all, spread over the "
        "run: a thin class among larger ones (repeatable; e.g. --thin code-edit=3)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here (scripts/bench-docs reads them)")
    args = parser.parse_args()
    binary = find_server()
    if binary is None:
        print("no llama-server: bash scripts/setup-llama-server; nothing measured")
        return 0
    prompts = [p for p in prompt_set(shipped_prompts("holdout"), None) if p.prompt_class in PAYS + LOSES]
    thin = {name: int(n) for name, _, n in (t.partition("=") for t in args.thin)}
    order = sent(prompts, args.cycles, thin)
    model = modelstore.resolve(modelstore.SMOLLM2.name)
    with tempfile.TemporaryDirectory() as tmp:
        print(f"host CPU pressure before: {cpu_pressure()}")
        servers = [Server(binary, model, mode, args.threads, 2048, Path(tmp)) for mode in (args.spec_type, "none")]
        try:
            for s in servers:
                s.wait_ready()
            spec, plain = (f"http://127.0.0.1:{s.port}" for s in servers)
            with proxy(spec, Path(tmp), ["--plain-upstream", plain]) as proxied:
                rows = measure(spec, plain, proxied, order, args.max_tokens)
        finally:
            for s in servers:
                s.stop()
        found = figures(rows, Path(tmp) / "proxy.specmon") | {
            "cycles": args.cycles,
            "max_tokens": args.max_tokens,
            "spec_type": args.spec_type,
            "threads": args.threads,
            "thin": thin,
        }
        print(f"host CPU pressure after:  {cpu_pressure()}")
    report(found)
    if args.json:
        args.json.write_text(json.dumps(found, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
