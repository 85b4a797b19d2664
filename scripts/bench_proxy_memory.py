#!/usr/bin/env python
"""Does `specmon proxy` stay small? Its resident memory (VmRSS) and open file descriptors over many
small requests against a fast fake llama-server, and its log's growth: bytes per request, and bytes
per hour while idle.

    .venv/bin/python scripts/bench_proxy_memory.py                        # 100,000 requests
    .venv/bin/python scripts/bench_proxy_memory.py --requests 20000 --idle-s 120

The fake upstream is a small llama-server-shaped ASGI app under uvicorn in its own process: /health
with `server: llama.cpp`, /v1/models, /metrics with llama-server's speculative counters (they move
with each reply, so the proxy's once-a-second reads log what they log in real use), and
/v1/chat/completions answering at once, whole or streamed, with llama-server's `timings`. The proxy
runs as `specmon proxy --headless` does (its own process, stdout to /dev/null, logging). The client
(raw HTTP/1.1: the host's cores are left to the proxy) keeps --concurrency requests in flight, each
worker on its own kept-alive connection: every other request streamed, the class named by
X-Specmon-Class in turn (chat, rewrite, code-edit), every reply checked whole. After --warmup requests
the proxy's RSS, descriptors and log size are read (the 0 point), then after each quarter of
--requests, each time with no request in flight. Then no request for --settle-s (the fold's recent
span ends: the read that says the counters stopped) and --idle-s measured: the log's growth there,
scaled to an hour. The proxy passes an unchanged read on every 300 s (watch.fold.HEARTBEAT_S), so an
idle window much shorter than that may hold none. Figures are printed, never asserted."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

from bench_llama_server import free_port  # scripts/ is on sys.path when run
from bench_proxy import cpu_pressure, proxy, wait_for

CLASSES = ("chat", "rewrite", "code-edit")
PROMPT = "Write the numbers from one to twelve in words, separated by commas."
TOKENS = ["one", ",", " two", ",", " three", ",", " four", ","]  # 8 tokens a reply
MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"


# -- the fake upstream --------------------------------------------------------------------------


class Counters:
    """The fake llama-server's /metrics: each reply moves them as a drafting server's would."""

    def __init__(self) -> None:
        self.replies = 0

    def reply(self) -> None:
        self.replies += 1

    def page(self) -> bytes:
        n = self.replies
        lines = []
        for name, kind, value in (
            ("prompt_tokens_total", "counter", 15 * n),
            ("prompt_seconds_total", "counter", 0.002 * n),
            ("tokens_predicted_total", "counter", len(TOKENS) * n),
            ("tokens_predicted_seconds_total", "counter", 0.004 * n),
            ("n_decode_total", "counter", 4 * n),
            ("spec_decode_num_draft_tokens_total", "counter", 6 * n),
            ("spec_decode_num_accepted_tokens_total", "counter", 4 * n),
            ("spec_decode_num_drafts_total", "counter", 2 * n),
            ("requests_processing", "gauge", 0),
            ("requests_deferred", "gauge", 0),
        ):
            lines += [f"# HELP llamacpp:{name} {name}", f"# TYPE llamacpp:{name} {kind}", f"llamacpp:{name} {value}"]
        name = "spec_decode_num_accepted_tokens_per_pos_total"
        lines += [f"# HELP llamacpp:{name} {name}", f"# TYPE llamacpp:{name} counter"]
        lines += [f'llamacpp:{name}{{position="{p}"}} {(2 - p // 2) * n}' for p in range(3)]
        return ("\n".join(lines) + "\n").encode()


TIMINGS = {
    "cache_n": 0,
    "prompt_n": 15,
    "prompt_ms": 2.0,
    "prompt_per_token_ms": 0.133,
    "prompt_per_second": 7500.0,
    "predicted_n": len(TOKENS),
    "predicted_ms": 4.0,
    "predicted_per_token_ms": 0.5,
    "predicted_per_second": 2000.0,
    "draft_n": 6,
    "draft_n_accepted": 4,
}


def chunk(i: int, delta: dict, finish: str | None = None, timings: bool = False) -> bytes:
    body = {
        "choices": [{"finish_reason": finish, "index": 0, "delta": delta}],
        "created": int(time.time()),
        "id": f"chatcmpl-{i}",
        "model": MODEL,
        "system_fingerprint": "b287-01d0073",
        "object": "chat.completion.chunk",
    }
    if timings:
        body["timings"] = TIMINGS
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def whole(i: int) -> bytes:
    body = {
        "choices": [
            {"finish_reason": "length", "index": 0, "message": {"role": "assistant", "content": "".join(TOKENS)}}
        ],
        "created": int(time.time()),
        "model": MODEL,
        "system_fingerprint": "b287-01d0073",
        "object": "chat.completion",
        "usage": {"completion_tokens": len(TOKENS), "prompt_tokens": 15, "total_tokens": 15 + len(TOKENS)},
        "id": f"chatcmpl-{i}",
        "timings": TIMINGS,
    }
    return json.dumps(body, separators=(",", ":")).encode()


def fake_app():
    """A raw ASGI app shaped like llama-server (recorded replies: tests/fixtures/proxy/, pages:
    tests/fixtures/metrics/): as little work a request as an upstream can do."""
    counters = Counters()
    server = [(b"server", b"llama.cpp")]

    async def send_whole(send, status: int, body: bytes, kind: bytes) -> None:
        headers = [*server, (b"content-type", kind), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def app(scope, receive, send):
        path = scope["path"]
        if path == "/health":
            return await send_whole(send, 200, b'{"status":"ok"}', b"application/json")
        if path == "/metrics":
            return await send_whole(send, 200, counters.page(), b"text/plain; version=0.0.4")
        if path == "/v1/models":
            models = {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "llamacpp"}]}
            return await send_whole(send, 200, json.dumps(models).encode(), b"application/json")
        if path != "/v1/chat/completions":
            return await send_whole(
                send, 404, b'{"error":{"code":404,"message":"File Not Found"}}', b"application/json"
            )
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        counters.reply()
        i = counters.replies
        if not json.loads(raw).get("stream"):
            return await send_whole(send, 200, whole(i), b"application/json; charset=utf-8")
        headers = [*server, (b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        parts = [chunk(i, {"role": "assistant", "content": None})]
        parts += [chunk(i, {"content": t}) for t in TOKENS]
        parts += [chunk(i, {}, "length", timings=True), b"data: [DONE]\n\n"]
        for part in parts:
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    return app


def serve_fake(port: int) -> None:
    import uvicorn

    uvicorn.run(fake_app(), host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="off")


def fake_upstream(log_dir: Path):
    """The fake llama-server in its own process: (its process, its URL)."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve-fake", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=open(log_dir / "fake.err", "w"),
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(f"{url}/health", timeout=2, trust_env=False).status_code == 200
        except httpx.TransportError:
            return False

    wait_for(healthy, process, "the fake upstream")
    return process, url


# -- the proxy process --------------------------------------------------------------------------


def proxy_pid(log: Path) -> int:
    """The one process whose command line names this run's log (bench_proxy.proxy yields its URL only)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                args = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if str(log).encode() in args and b"proxy" in args:
                found.append(int(entry))
    if len(found) != 1:
        raise SystemExit(f"expected one proxy process logging to {log}, found {found}")
    return found[0]


def log_bytes(log: Path) -> int:
    """The log's size with any rotated parts (LOG.1.specmon, ...)."""
    return sum(p.stat().st_size for p in log.parent.glob(f"{log.stem}*.specmon"))


def cpu_s(pid: int) -> float:
    """The process's CPU time so far (user + system), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sample(pid: int, log: Path, done: int, start: float) -> dict:
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return {
        "cpu_s": cpu_s(pid),
        "requests": done,
        "rss_mb": int(status["VmRSS"].split()[0]) / 1024,
        "hwm_mb": int(status["VmHWM"].split()[0]) / 1024,
        "threads": int(status["Threads"]),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "log_bytes": log_bytes(log),
        "seconds": round(time.monotonic() - start, 1),
    }


# -- the client ---------------------------------------------------------------------------------


def request_bytes(host: str, i: int) -> bytes:
    """Request i as HTTP/1.1 on a kept-alive connection: every other one streamed, the classes in turn."""
    stream = i % 2 == 0
    body = json.dumps(
        {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": len(TOKENS), "stream": stream}
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"X-Specmon-Class: {CLASSES[i % len(CLASSES)]}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def reply(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """(status, body, the connection stays open) of one HTTP/1.1 reply, whole or chunked."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    status = int(head[0].split()[1])
    headers = dict((k.strip().lower(), v.strip().lower()) for k, v in (h.split(":", 1) for h in head[1:] if h))
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    else:  # chunked
        parts = []
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            parts.append((await reader.readexactly(size + 2))[:-2])
        await reader.readuntil(b"\r\n")
        body = b"".join(parts)
    return status, body, headers.get("connection") != "close"


def whole_reply(i: int, status: int, body: bytes) -> bool:
    """The reply is what the fake sent: a stream to its [DONE], a reply with its timings."""
    if status != 200:
        return False
    return body.endswith(b"data: [DONE]\n\n") if i % 2 == 0 else body.endswith(b"}") and b'"timings"' in body


async def load(base: str, first: int, last: int, concurrency: int, tally: Counter) -> None:
    """Requests first..last-1, `concurrency` in flight, each worker on its own kept-alive connection (a
    client as small as can be: the host's cores are the proxy's); returns with none in flight."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    numbers = iter(range(first, last))

    async def worker() -> None:
        reader = writer = None
        for i in numbers:
            try:
                if writer is None:
                    reader, writer = await asyncio.open_connection(host, int(port))
                writer.write(request_bytes(f"{host}:{port}", i))
                status, body, keep = await asyncio.wait_for(reply(reader), 60)
                tally[status if whole_reply(i, status, body) else f"{status} incomplete"] += 1
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError) as exc:
                tally[type(exc).__name__] += 1
                keep = False
            if not keep and writer is not None:
                writer.close()
                reader = writer = None
        if writer is not None:
            writer.close()
            await writer.wait_closed()

    await asyncio.gather(*(worker() for _ in range(concurrency)))


def measure(base: str, log: Path, args) -> dict:
    pid = proxy_pid(log)
    tally: Counter = Counter()
    start = time.monotonic()
    asyncio.run(load(base, 0, args.warmup, args.concurrency, tally))
    time.sleep(1)  # the log's writer thread catches up; the next read of /metrics runs
    points = [sample(pid, log, 0, start)]
    print(f"after {args.warmup} warm-up requests: {points[0]}", file=sys.stderr)
    edges = [args.warmup + args.requests * q // 4 for q in range(5)]
    for a, b in zip(edges, edges[1:]):
        asyncio.run(load(base, a, b, args.concurrency, tally))
        time.sleep(1)
        points.append(sample(pid, log, b - args.warmup, start))
        print(f"{points[-1]}", file=sys.stderr)
    load_s = time.monotonic() - start
    time.sleep(args.settle_s)
    events_before = events(log)  # read before the window opens: the proxy's idle work is what it measures
    before, idle_from = sample(pid, log, args.requests, start), time.monotonic()
    time.sleep(args.idle_s)
    after, idle_to = sample(pid, log, args.requests, start), time.monotonic()
    written = events(log)
    written.subtract(events_before)
    return {
        "pid": pid,
        "points": points,
        "tally": tally,
        "load_s": load_s,
        "client_cpu_s": time.process_time(),
        "idle": {"before": before, "after": after, "seconds": idle_to - idle_from, "events": +written},
    }


def events(log: Path) -> Counter:
    """The log's events so far, by type (the live file and any rotated parts)."""
    from specmon.events.log import LogDamaged, read_log

    out: Counter = Counter()
    for part in sorted(log.parent.glob(f"{log.stem}*.specmon")):
        try:
            for event in read_log(part):
                out[type(event).__name__] += 1
        except LogDamaged:  # a frame half-written as it was read: counted at the next read
            pass
    return out


def figures(found: dict, args) -> dict:
    points, idle = found["points"], found["idle"]
    first, last = points[0], points[-1]
    idle_s = idle["seconds"]
    idle_bytes = idle["after"]["log_bytes"] - idle["before"]["log_bytes"]
    t_load = (first["seconds"], last["seconds"])
    return {
        "requests": args.requests,
        "warmup": args.warmup,
        "concurrency": args.concurrency,
        "classes": list(CLASSES),
        "streamed_share": 0.5,
        "tokens_per_reply": len(TOKENS),
        "replies": {str(k): v for k, v in sorted(found["tally"].items(), key=str)},
        "points": points,
        "rss_growth_mb": last["rss_mb"] - first["rss_mb"],
        "fds_growth": last["fds"] - first["fds"],
        "requests_per_s": args.requests / (t_load[1] - t_load[0]) if t_load[1] > t_load[0] else None,
        "log_bytes_per_request": (last["log_bytes"] - first["log_bytes"]) / args.requests,
        "idle": {
            "settle_s": args.settle_s,
            "seconds": round(idle_s, 1),
            "log_bytes": idle_bytes,
            "bytes_per_hour": idle_bytes * 3600 / idle_s,
            "events": dict(idle["events"]),
            "proxy_cpu_s": idle["after"]["cpu_s"] - idle["before"]["cpu_s"],
            "rss_mb_before": idle["before"]["rss_mb"],
            "rss_mb_after": idle["after"]["rss_mb"],
            "fds_after": idle["after"]["fds"],
        },
        "load_seconds": round(found["load_s"], 1),
        "proxy_cpu_ms_per_request": (last["cpu_s"] - first["cpu_s"]) * 1e3 / args.requests,
        "client_cpu_s": round(found["client_cpu_s"], 1),
    }


def report(fig: dict) -> None:
    print(f"{'requests':>9} {'RSS MB':>8} {'growth':>7} {'fds':>4} {'log bytes':>10}")
    base = fig["points"][0]
    for p in fig["points"]:
        growth = p["rss_mb"] - base["rss_mb"]
        print(f"{p['requests']:>9} {p['rss_mb']:>8.1f} {growth:>+7.1f} {p['fds']:>4} {p['log_bytes']:>10}")
    idle = fig["idle"]
    print(
        f"RSS growth after {fig['warmup']} warm-up requests: {fig['rss_growth_mb']:+.1f} MB over {fig['requests']} "
        f"requests ({fig['requests_per_s']:.0f} requests/s, {fig['concurrency']} in flight; the proxy's CPU "
        f"{fig['proxy_cpu_ms_per_request']:.2f} ms a request); replies: {fig['replies']}"
    )
    print(
        f"log: {fig['log_bytes_per_request']:.1f} bytes a request; idle: {idle['log_bytes']} bytes in "
        f"{idle['seconds']:.0f} s (after {idle['settle_s']:.0f} s settling) = {idle['bytes_per_hour']:.0f} bytes an "
        f"hour; events in that window: {idle['events']}; RSS {idle['rss_mb_before']:.1f} -> {idle['rss_mb_after']:.1f} MB"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000, help="requests measured (default 100000)")
    parser.add_argument("--warmup", type=int, default=2000, help="requests before the 0 point (default 2000)")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight (default 16)")
    parser.add_argument(
        "--settle-s", type=float, default=65.0, help="quiet before the idle window (default 65: the fold's 60 s span)"
    )
    parser.add_argument("--idle-s", type=float, default=300.0, help="the idle window measured (default 300)")
    parser.add_argument("--json", type=Path, help="also write the figures here (scripts/bench-docs reads them)")
    parser.add_argument("--serve-fake", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake:
        serve_fake(args.serve_fake)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        print(f"host CPU pressure before: {cpu_pressure()}")
        fake, url = fake_upstream(Path(tmp))
        log = Path(tmp) / "proxy.specmon"
        try:
            with proxy(url, Path(tmp)) as proxied:
                found = measure(proxied, log, args)
        finally:
            fake.terminate()
            fake.wait(timeout=30)
        print(f"host CPU pressure after:  {cpu_pressure()}")
        fig = figures(found, args)
    report(fig)
    if args.json:
        args.json.write_text(json.dumps(fig, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
