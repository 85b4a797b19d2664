"""`specmon proxy --upstream URL`: an OpenAI-compatible pass-through that classifies each request by a
policy's classes and logs the upstream's own timings per request (RequestTimed), optionally routing a
share of each class to a plain upstream to measure what speculation buys there."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_proxy(sub, whole, share) -> None:
    proxy = sub.add_parser(
        "proxy",
        help="pass OpenAI requests to a llama-server and measure speculation per class of real traffic",
        description="Listen as an OpenAI-compatible server and pass each request, streaming included, to "
        "--upstream, its reply relayed byte for byte as it arrives. Chat and completion requests are classified "
        "by the policy's classes (or name one: `specmon_class` in the body, or the X-Specmon-Class header) and "
        "each reply's timings (drafted, accepted, generated tokens and decode ms) are logged, so the view and "
        "log info show acceptance, tokens per step and tok/s per class; the upstream's /metrics is read every "
        "second. With --plain-upstream (the same model without speculation) a share of each class goes there, "
        "interleaved, and the advice says per class what speculation buys (with its 95% interval) and what it "
        "would change. Nothing is applied upstream: llama-server takes no per-request switch for speculation. "
        "vLLM's replies carry no timings: through the proxy its requests are counted, not measured (watch it).",
    )
    proxy.add_argument("--upstream", required=True, metavar="URL", help="the server with speculation on")
    proxy.add_argument("--plain-upstream", metavar="URL", help="the same model without speculation (a baseline)")
    proxy.add_argument(
        "--plain-share",
        type=share,
        default=0.25,
        metavar="FRACTION",
        help="of each class's requests sent to --plain-upstream, interleaved (default 0.25)",
    )
    proxy.add_argument("--policy", type=Path, help="TOML policy whose classes sort requests (default: default)")
    proxy.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    proxy.add_argument("--port", type=whole(0, 65535), default=8001, help="default 8001 (0: any free port)")
    proxy.add_argument(
        "--api-key-file", type=Path, metavar="FILE", help="the key clients must send (0600 file); not sent on upstream"
    )
    proxy.add_argument(
        "--upstream-api-key-file",
        type=Path,
        metavar="FILE",
        help="the upstreams' key (0600 file), sent to them and to their /metrics as Authorization: Bearer",
    )
    proxy.add_argument("--log", type=Path, help="session log path (default: logs/SESSION.specmon)")
    proxy.add_argument("--headless", action="store_true", help="print one line per request instead of the TUI")
    proxy.set_defaults(handler=cmd_proxy)


def cmd_proxy(args: argparse.Namespace) -> int:
    from specmon.proxy.command import run_proxy  # the HTTP client and server load only when proxying

    return run_proxy(args)
