#!/usr/bin/env python
"""What serving costs: tokens/s streamed through `specmon serve` (the official openai client on
loopback) vs direct decoding of the same prompts by the same session driver, interleaved prompt
by prompt (alternating which goes first, so drift falls on both); then 4 concurrent clients.

Both paths decode at the same fixed k (the profile's, or -k), in one live session and one log.
The clients run in a child process (as real clients do: their parsing must not hold the server's
GIL). Time to first token and per-token latency are measured at the client; a chunk's tokens are
counted from the log's rounds (each chunk names its round). Prints a table; never asserts.

    python scripts/bench_serve.py --prompts 10 --max-tokens 64 --repeat 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import openai

from specmon.backends.loader import load_pair
from specmon.backends.profiles import load_profile
from specmon.engine.draft_len import FixedDraftLen
from specmon.engine.driver import UNCHECKED
from specmon.engine.prompts import builtin_suite
from specmon.events.log import read_log
from specmon.events.schema import PromptFinished, RoundVerified
from specmon.metrics import rates
from specmon.server.runner import ServeOptions, Serving
from specmon.transport.session import live_session


@dataclass
class Streamed:
    request_id: str
    sent: float
    chunks: list[tuple[float, int]] = field(default_factory=list)  # (arrival, round id) of each text chunk
    done: float = 0.0
    tokens: int = 0


def stream(api: openai.OpenAI, text: str, max_tokens: int) -> Streamed:
    result = Streamed("", time.perf_counter())
    for chunk in api.chat.completions.create(model="m", messages=[{"role": "user", "content": text}], stream=True,
                                             max_tokens=max_tokens, temperature=0,
                                             stream_options={"include_usage": True}):
        now = time.perf_counter()
        result.request_id = chunk.id
        if chunk.usage is not None:
            result.tokens = chunk.usage.completion_tokens
        elif chunk.choices and chunk.choices[0].delta.content and chunk.specmon:
            result.chunks.append((now, chunk.specmon["round_id"]))
    result.done = time.perf_counter()
    return result


def client_process(url: str) -> int:
    """The child: each stdin line is a batch {"texts": [...], "clients": n, "max_tokens": m}; answers one
    line of results (client-side times) and the batch's wall time."""
    api = openai.OpenAI(base_url=url + "/v1", api_key="bench", max_retries=0)
    for line in sys.stdin:
        batch = json.loads(line)
        results: list[Streamed] = []
        lock = threading.Lock()

        def run(share):
            mine = [stream(api, text, batch["max_tokens"]) for text in share]
            with lock:
                results.extend(mine)

        start = time.perf_counter()
        threads = [threading.Thread(target=run, args=(batch["texts"][c::batch["clients"]],))
                   for c in range(batch["clients"])]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - start
        print(json.dumps({"wall": wall, "results": [r.__dict__ for r in results]}), flush=True)
    return 0


class Clients:
    def __init__(self, url: str):
        self.proc = subprocess.Popen([sys.executable, __file__, "--client", url], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def ask(self, texts: list[str], clients: int, max_tokens: int) -> tuple[float, list[Streamed]]:
        self.proc.stdin.write(json.dumps({"texts": texts, "clients": clients, "max_tokens": max_tokens}) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        return answer["wall"], [Streamed(**r) for r in answer["results"]]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def direct(session, drafter, k: int, prompt, max_tokens: int) -> tuple[float, int]:
    """(seconds, tokens) of the session driver decoding the prompt itself, as `specmon run` does."""
    driver = session.driver
    start = time.perf_counter()
    done = driver.decode(prompt, drafter, FixedDraftLen(k), _greedy(), max_tokens, class_rule="bench: direct")
    driver.finish(done, UNCHECKED)
    return time.perf_counter() - start, len(done.run.generated)


def _greedy():
    from specmon.events.schema import Sampling

    return Sampling()


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


def pct(values: list[float], q: float) -> str:
    return f"{np.percentile(values, q) * 1e3:.1f}" if values else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="smollm2-cpu")
    parser.add_argument("-k", "--draft-len", type=int, help="default: the profile's")
    parser.add_argument("--prompts", type=int, default=10, help="how many of the built-in suite's prompts")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=2, help="passes over the prompts at 1 client")
    parser.add_argument("--client", help=argparse.SUPPRESS)  # the child process's role
    args = parser.parse_args()
    if args.client:
        return client_process(args.client)
    profile = load_profile(args.profile)
    pair = load_pair(profile)
    k = profile.drafter.draft_len if args.draft_len is None else args.draft_len
    prompts = builtin_suite()[:: max(1, 20 // args.prompts)][: args.prompts]
    log = Path(tempfile.mkdtemp()) / "bench-serve.specmon"
    with live_session(pair, profile, pair.drafter, log, serve=False, announce=False, keep_events=False) as session:
        server = Serving(session, pair, profile, ServeOptions(port=0, max_queue=64, draft_len=k))
        server.start()
        clients = Clients(server.url)
        clients.ask(["Hello!"], 1, 8)  # warm-up: the first request's imports and allocations
        one, direct_runs = [], []
        for rep in range(args.repeat):
            for i, prompt in enumerate(prompts):
                steps = [lambda: one.extend(clients.ask([prompt.text], 1, args.max_tokens)[1]),
                         lambda: direct_runs.append(direct(session, pair.drafter, k, prompt, args.max_tokens))]
                for step in steps if (i + rep) % 2 == 0 else reversed(steps):
                    step()
        four_wall, four = clients.ask([p.text for p in prompts], 4, args.max_tokens)
        clients.close()
        server.stop()
    events = list(read_log(log))
    emitted = {e.round_id: len(e.emitted) for e in events if isinstance(e, RoundVerified)}
    prefill = statistics.median(e.prefill_ms for e in events if isinstance(e, PromptFinished))
    first = statistics.median(rates.round_ms(e) for e in events if isinstance(e, RoundVerified) and e.round_index == 0)
    report(one, direct_runs, four, four_wall, emitted, (prefill, first), k, args)
    return 0


def report(one, direct_runs, four, four_wall, emitted, medians, k, args) -> None:
    direct_tps = sum(t for _, t in direct_runs) / sum(s for s, _ in direct_runs)
    one_tps = sum(r.tokens for r in one) / sum(r.done - r.sent for r in one)
    four_tps = sum(r.tokens for r in four) / four_wall
    rows = [("direct (driver)", "1", len(direct_runs), direct_tps, None, None),
            ("served, streamed", "1", len(one), one_tps, *latencies(one, emitted)),
            ("served, streamed", "4", len(four), four_tps, *latencies(four, emitted))]
    prefill_ms, first_ms = medians
    print(f"profile {args.profile}, k={k}, greedy, {args.max_tokens} tokens max; medians: prefill {prefill_ms:.1f} ms, "
          f"first round {first_ms:.1f} ms (TTFT aim at 1 client: <= {prefill_ms + first_ms + 5:.1f} ms)")
    print("| path | clients | requests | tok/s | vs direct | TTFT p50 ms | TTFT p99 ms | per-token p50 ms | "
          "per-token p99 ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for path, clients, n, tps, ttft, per_token in rows:
        print(f"| {path} | {clients} | {n} | {tps:.1f} | {tps / direct_tps:.3f}x | {pct(ttft or [], 50)} | "
              f"{pct(ttft or [], 99)} | {pct(per_token or [], 50)} | {pct(per_token or [], 99)} |")


if __name__ == "__main__":
    sys.exit(main())
