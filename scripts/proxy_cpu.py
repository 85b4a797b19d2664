#!/usr/bin/env python
"""What the proxy itself costs a request in CPU: `specmon proxy` (headless, logging, both sides) in front of
the tests' llama-server stand-in, which replays a recorded 35-event stream at once, then N chat requests in
turn, streamed and then whole; the proxy process's user + system CPU from /proc, before and after, per
request and per relayed chunk. On a host whose cores the servers share, this is what routing costs decoding.

    .venv/bin/python scripts/proxy_cpu.py --requests 300

Figures are printed, never asserted."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import httpx  # noqa: E402
from proxycli import proxy_command  # noqa: E402
from upstream import FakeUpstream, recorded, request_body, sse_events  # noqa: E402

WARM = 20  # requests before the count: connections opened, code paths compiled


def cpu_s(pid: int) -> float:
    """A process's user + system CPU seconds so far (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(requests: int, stream: bool, folder: str) -> tuple[float, float]:
    """(CPU ms, wall ms) a request, through a proxy of its own."""
    with FakeUpstream() as spec, FakeUpstream("-plain") as plain:
        log = f"{folder}/proxy-{int(stream)}.specmon"
        argv = ["--upstream", spec.url, "--plain-upstream", plain.url, "--port", "0", "--headless", "--log", log]
        with proxy_command(*argv) as run, httpx.Client(base_url=run.url, timeout=30) as client:
            body = request_body("chat", stream=stream)
            for _ in range(WARM):
                client.post("/v1/chat/completions", json=body).read()
            cpu, wall = cpu_s(run.proc.pid), time.perf_counter()
            for _ in range(requests):
                client.post("/v1/chat/completions", json=body).read()
            cpu, wall = cpu_s(run.proc.pid) - cpu, time.perf_counter() - wall
    return cpu / requests * 1e3, wall / requests * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="timed requests of each kind (default 300)")
    args = parser.parse_args()
    chunks = len(sse_events(recorded("chat-stream.sse")))
    with tempfile.TemporaryDirectory(prefix="proxy-cpu-") as folder:
        for stream in (True, False):
            cpu, wall = measure(args.requests, stream, folder)
            per_chunk = f" ({cpu / chunks:.3f} ms a chunk of {chunks})" if stream else ""
            kind = "streamed" if stream else "whole"
            print(f"{kind}: proxy CPU {cpu:.2f} ms a request{per_chunk}, wall {wall:.1f} ms a request")
    return 0


if __name__ == "__main__":
    sys.exit(main())
