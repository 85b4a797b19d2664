"""`specmon watch URL`'s command line (the command is specmon/watch/command.py)."""

from __future__ import annotations

from pathlib import Path

from specmon.cli.flags import add_log_rotation, finite

KINDS = ("auto", "llama-server", "vllm", "specmon")


def add_watch(sub) -> None:
    positive_seconds = finite(0.0, above_low=True)
    watch = sub.add_parser(
        "watch",
        help="watch a running llama-server, vLLM or specmon serve through its /metrics",
        description="Read URL/metrics every --interval and show acceptance (accepted / drafted tokens), "
        "accepted tokens per draft, acceptance by draft position, drafts and tokens per second and the "
        "requests running and waiting, each over the window it covers. What was read is logged, so attach, "
        "replay, log info and report work on a watch as on any session. A server that is down, restarts or "
        "answers something else is one line, and the watch goes on.",
        epilog="llama-server publishes its counters only with --metrics (and drafts only with a --spec-type); "
        "vLLM publishes the speculative ones when it runs with a speculative config.",
    )
    watch.add_argument("url", metavar="URL", help="the server's base URL, e.g. http://127.0.0.1:8080")
    watch.add_argument("--kind", choices=KINDS, default="auto", help="whose metric names to read (default: detect)")
    watch.add_argument(
        "--interval", type=positive_seconds, default=1.0, metavar="SECONDS", help="between reads (default 1)"
    )
    watch.add_argument("--duration", type=positive_seconds, metavar="SECONDS", help="stop after (default: Ctrl-C)")
    watch.add_argument("--api-key-file", type=Path, metavar="FILE", help="a file holding the server's API key")
    watch.add_argument("--log", type=Path, help="session log path (default: logs/SESSION.specmon)")
    add_log_rotation(watch)
    watch.add_argument("--listen", metavar="127.0.0.1:PORT", help="also serve events over TCP (as run --listen)")
    watch.add_argument("--headless", action="store_true", help="print one line per window instead of the TUI")
    watch.set_defaults(log_keeps="every read")
