#!/usr/bin/env python
"""specmon's policy against llama-server's own n-gram modes: same GGUF, same prompts, interleaved.

Each prompt is decoded by specmon under its policy and plainly (as `specmon bench policy --ks 0`
does), then by one llama-server per mode (plain and each n-gram --spec-type, all started once; only
the one asked works, and the order rotates from prompt to prompt). Every side is judged against
its own plain decoding, in tokens per second of decode time (specmon: round time; llama-server:
its `timings.predicted_ms`), pooled per class. Both decode greedily from the same token ids.

    bash scripts/setup-llama-server     # builds llama-server from the llama.cpp specmon binds (minutes)
    .venv/bin/python scripts/bench_llama_server.py --prompts bench --half test

Without a llama-server (--server, $LLAMA_SERVER, .venv/bin or PATH) it prints why and
exits 0: the comparison is skipped, not failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

from specmon.backends.llamacpp_loader import gguf_path
from specmon.backends.loader import load_pair
from specmon.backends.profiles import load_profile
from specmon.policy.engine import PolicyEngine
from specmon.policy.schema import load_policy
from specmon.sched.bench import bench_prompts, bench_results, overall_figures, run_bench
from specmon.sched.policy import PolicyScheduler
from specmon.transport.session import live_session

MODES = ("none", "ngram-simple", "ngram-map-k", "ngram-mod")  # llama-server's --spec-type n-gram modes
ROOT = Path(__file__).resolve().parent.parent


def find_server() -> Path | None:
    for candidate in (
        os.environ.get("LLAMA_SERVER"),
        ROOT / ".venv/bin/llama-server",
        shutil.which("llama-server"),
    ):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """One llama-server on the GGUF with one --spec-type, one slot, `threads` threads."""

    def __init__(self, binary: Path, model: Path, mode: str, threads: int, ctx: int, log_dir: Path):
        self.mode, self.port = mode, free_port()
        args = [
            str(binary),
            "-m",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "-np",
            "1",
            "-c",
            str(ctx),
            "-t",
            str(threads),
            "-tb",
            str(threads),
            "--no-webui",
        ]
        if mode != "none":
            args += ["--spec-type", mode]
        self.log = open(log_dir / f"llama-server-{mode}.log", "wb")
        self.process = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"llama-server --spec-type {self.mode} exited (see {self.log.name})")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass  # not listening yet, or loading (503)
            time.sleep(0.2)
        raise SystemExit(f"llama-server --spec-type {self.mode} not ready after {timeout_s:.0f} s")

    def complete(self, tokens: list[int], max_new_tokens: int) -> tuple[int, float]:
        """Tokens generated and decode ms (prompt processing excluded), greedy, no prompt cache."""
        body = json.dumps(
            {
                "prompt": tokens,
                "n_predict": max_new_tokens,
                "temperature": 0.0,
                "top_k": 1,
                "cache_prompt": False,
                "seed": 0,
            }
        ).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/completion", body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=600) as reply:
            timings = json.load(reply)["timings"]
        return int(timings["predicted_n"]), float(timings["predicted_ms"])

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", help="llama-server binary (default: $LLAMA_SERVER, .venv/bin, PATH)")
    parser.add_argument("--profile", default="smollm2-llamacpp")
    parser.add_argument("--policy", default="default")
    parser.add_argument("--prompts", type=Path, default=Path("bench"))
    parser.add_argument("--half", choices=("tune", "test"))
    parser.add_argument("--classes")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--log", type=Path, default=Path("/tmp/specmon-vs-llama-server.specmon"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.server and not os.access(args.server, os.X_OK):
        raise SystemExit(f"--server {args.server}: no such executable")
    binary = Path(args.server) if args.server else find_server()
    if binary is None:
        print("skipped: no llama-server found (bash scripts/setup-llama-server builds one; or pass --server)")
        return 0
    profile = load_profile(args.profile)
    if profile.backend != "llamacpp":
        raise SystemExit(f"profile {args.profile} runs on {profile.backend}; llama-server needs a llamacpp profile")
    policy = load_policy(args.policy)
    prompts = bench_prompts(args)
    pair = load_pair(profile, profile.drafter)
    servers = [
        Server(binary, gguf_path(profile.target, profile), mode, args.threads, profile.max_seq_len, args.log.parent)
        for mode in MODES
    ]
    totals: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0, 0.0]))
    try:
        for server in servers:
            server.wait_ready()
        with live_session(pair, profile, args.log, policy=policy) as session:
            scheduler = PolicyScheduler(
                session.driver, PolicyEngine(policy, session.session_id, session.costs), pair.drafter
            )
            sequence = list(prompts) * args.repeat

            def after_specmon(done: int) -> None:  # the same prompt on every server, in rotating order
                prompt = sequence[done - 1]
                name = scheduler.engine.classify(
                    prompt.text, prompt.prompt_class if prompt.prompt_class != "default" else None
                )[0]
                tokens = pair.tokenizer.encode_chat(prompt.text)
                shift = done % len(servers)
                for server in servers[shift:] + servers[:shift]:
                    n, ms = server.complete(tokens, args.max_new_tokens)
                    totals[name][server.mode][0] += n
                    totals[name][server.mode][1] += ms
                print(f"\r{done}/{len(sequence)} prompts", end="", file=sys.stderr, flush=True)

            run_bench(
                scheduler,
                prompts,
                [0],
                args.repeat,
                profile.sampling.to_event(),
                args.max_new_tokens,
                on_prompt=after_specmon,
            )
            print(file=sys.stderr)
    finally:
        for server in servers:
            server.stop()
    report(bench_results(session.events), totals, args)
    return 0


def report(specmon: dict, server: dict, args) -> None:
    """Per class and over all of them: each side's plain tok/s and every mode over its own plain."""
    print(
        f"{'class':12} {'specmon plain':>13} {'auto/plain':>10} {'server plain':>12} "
        + " ".join(f"{mode + '/plain':>18}" for mode in MODES[1:])
    )
    everything = {mode: [sum(server[name][mode][i] for name in server) for i in (0, 1)] for mode in MODES}
    overall = overall_figures(specmon, [0])  # the bench's own pooling over classes
    rows = {name: row(server[name], specmon[name].auto.tok_per_s, specmon[name].plain) for name in sorted(server)}
    rows["all"] = row(everything, overall["auto"], overall["fixed"]["0"])
    for name, r in rows.items():
        print(
            f"{name:12} {r['specmon_plain']:13.1f} {r['auto_over_plain']:10.3f} {r['server_plain']:12.1f} "
            + " ".join(f"{r['server_over_plain'][mode]:18.3f}" for mode in MODES[1:])
        )
    print(f"(specmon log: {args.log}; llama-server logs beside it)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


def row(server: dict, auto: float, plain: float) -> dict:
    """specmon's tok/s as given; the server's from [tokens, ms]; each side's modes over its own plain."""
    rate = {mode: tokens / ms * 1e3 for mode, (tokens, ms) in server.items()}
    return {
        "specmon_plain": plain,
        "auto_over_plain": auto / plain,
        "server_plain": rate["none"],
        "server_over_plain": {mode: rate[mode] / rate["none"] for mode in MODES[1:]},
    }


if __name__ == "__main__":
    sys.exit(main())
