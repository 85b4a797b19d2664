#!/usr/bin/env python
"""What `specmon proxy` adds to a streamed request: time to first byte and total time, direct to a
llama-server and through the proxy, interleaved pair by pair (the order alternates), so both sides
see the same server and the same host at the same moments.

    .venv/bin/python scripts/bench_proxy.py                       # starts llama-server (self-draft) itself
    .venv/bin/python scripts/bench_proxy.py --upstream http://127.0.0.1:8080 --requests 200

The proxy runs as `specmon proxy --headless` does (its own process, logging, reading /metrics each
second). Each request opens a fresh connection on both sides (the proxy does too: llama-server drops
a kept-alive connection after a stream). Without a llama-server (--upstream, $LLAMA_SERVER,
.venv/bin or PATH) it prints why and exits 0. Figures are printed, never asserted."""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

from bench_llama_server import find_server, free_port  # scripts/ is on sys.path when run

ROOT = Path(__file__).resolve().parent.parent
BODY = {
    "messages": [{"role": "user", "content": "Write the numbers from one to twelve in words."}],
    "max_tokens": 8,
    "temperature": 0,
    "stream": True,
}


@contextmanager
def llama_server(binary: Path, log_dir: Path):
    """llama-server on the embedded GGUF, drafting with itself (4 tokens), 2 threads, one slot."""
    from specmon.backends import modelstore

    model = str(modelstore.resolve(modelstore.SMOLLM2.name))
    port = free_port()
    args = [str(binary), "-m", model, "--host", "127.0.0.1", "--port", str(port), "-np", "1", "-c", "2048"]
    args += [
        "-t",
        "2",
        "--metrics",
        "--no-webui",
        "--spec-type",
        "draft-simple",
        "-md",
        model,
        "--spec-draft-n-max",
        "4",
    ]
    with open(log_dir / "llama-server.log", "wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_for(lambda: _healthy(url), process, "llama-server")
            yield url
        finally:
            process.terminate()
            process.wait(timeout=30)


@contextmanager
def proxy(upstream: str, log_dir: Path, extra: tuple[str, ...] = ()):
    """`specmon proxy --headless --port 0` (and `extra` flags) in its own process, logging to
    log_dir/proxy.specmon, its memory store in log_dir/state (empty: it starts cold, and the user's own
    store is neither read nor written); yields its base URL."""
    err = open(log_dir / "proxy.err", "w+")
    process = subprocess.Popen(
        [sys.executable, "-m", "specmon.cli", "proxy", "--upstream", upstream, "--port", "0", "--headless"]
        + ["--log", str(log_dir / "proxy.specmon"), *extra],
        stdout=subprocess.DEVNULL,
        stderr=err,
        cwd=ROOT,
        env={**os.environ, "SPECMON_STATE": str(log_dir / "state")},
    )
    try:
        found: list[str] = []

        def listening() -> bool:
            err.seek(0)
            found[:] = re.findall(r"proxying (http://[\d.]+:\d+)/v1", err.read())
            return bool(found)

        wait_for(listening, process, "specmon proxy")
        yield found[0]
    finally:
        process.terminate()
        process.wait(timeout=30)
        err.close()


def wait_for(condition, process: subprocess.Popen, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{what} did not start (exit {process.returncode})")
        time.sleep(0.1)  # another process is starting


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def one_request(client: httpx.Client, base: str) -> tuple[float, float]:
    """(ms to the reply's first body byte, ms to its last) of one streamed chat request."""
    start = time.perf_counter()
    first = None
    with client.stream("POST", f"{base}/v1/chat/completions", json=BODY) as reply:
        for _ in reply.iter_raw():
            if first is None:
                first = time.perf_counter()
    end = time.perf_counter()
    return (first - start) * 1e3, (end - start) * 1e3


def cpu_pressure() -> str:
    try:
        return Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except OSError:
        return "n/a"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(direct: str, proxied: str, pairs: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {k: [] for k in ("ttfb_direct", "ttfb_proxy", "total_direct", "total_proxy")}
    limits = httpx.Limits(max_keepalive_connections=0)  # a fresh connection each request, as the proxy opens
    with httpx.Client(timeout=300, limits=limits, trust_env=False) as client:
        one_request(client, direct), one_request(client, proxied)  # warm: the prompt enters llama-server's cache
        for i in range(pairs):
            order = [("direct", direct), ("proxy", proxied)]
            for side, base in order if i % 2 == 0 else order[::-1]:
                ttfb, total = one_request(client, base)
                out[f"ttfb_{side}"].append(ttfb)
                out[f"total_{side}"].append(total)
    return out


def summary(found: dict[str, list[float]]) -> dict:
    """Each side's median and the paired added time (median, p99), for the time to first byte and the total."""
    out: dict = {"pairs": len(found["ttfb_direct"])}
    for what in ("ttfb", "total"):
        added = [p - d for p, d in zip(found[f"{what}_proxy"], found[f"{what}_direct"])]
        out[what] = {
            "direct_median_ms": statistics.median(found[f"{what}_direct"]),
            "proxy_median_ms": statistics.median(found[f"{what}_proxy"]),
            "added_median_ms": statistics.median(added),
            "added_p99_ms": percentile(added, 0.99),
        }
    return out


def report(figures: dict) -> None:
    for what, name in (("ttfb", "time to first byte"), ("total", "total time")):
        f = figures[what]
        print(
            f"{name}: direct median {f['direct_median_ms']:.1f} ms, through the proxy {f['proxy_median_ms']:.1f} ms; "
            f"added (paired) median {f['added_median_ms']:.2f} ms, p99 {f['added_p99_ms']:.2f} ms "
            f"over {figures['pairs']} pairs"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", help="a running llama-server (default: start one on the embedded GGUF)")
    parser.add_argument("--requests", type=int, default=100, help="pairs of requests (default 100)")
    parser.add_argument("--json", type=Path, help="also write the figures here (scripts/bench-docs reads them)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(f"host CPU pressure before: {cpu_pressure()}")
        if args.upstream:
            with proxy(args.upstream, Path(tmp)) as proxied:
                found = measure(args.upstream, proxied, args.requests)
        else:
            binary = find_server()
            if binary is None:
                print("no llama-server: bash scripts/setup-llama-server, or give --upstream URL; nothing measured")
                return 0
            with llama_server(binary, Path(tmp)) as direct, proxy(direct, Path(tmp)) as proxied:
                found = measure(direct, proxied, args.requests)
        print(f"host CPU pressure after:  {cpu_pressure()}")
    figures = summary(found)
    report(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
