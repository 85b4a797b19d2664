"""The command lines of `specmon proxy` and `specmon watch`, which read servers specmon does not run (their
commands are specmon/proxy/command.py and specmon/watch/command.py)."""

from __future__ import annotations

from pathlib import Path

from specmon.cli.flags import add_log, finite, whole
from specmon.cli.tools import lazy
from specmon.memory.store import state_dir
from specmon.proxy.deadlines import IDLE_TIMEOUT_S, WHOLE_REPLY_FACTOR

KINDS = ("auto", "llama-server", "vllm", "specmon")  # whose metric names a watch reads


def add_proxy(sub) -> None:
    proxy = sub.add_parser(
        "proxy",
        help="pass OpenAI requests to llama-server, vLLM or TabbyAPI, measure speculation per class, route by it",
        description="Listen as an OpenAI-compatible server and pass each request, streaming included, to "
        "--upstream, its reply relayed byte for byte as it arrives. Chat and completion requests are classified "
        "by the policy's classes (or name one: `specmon_class` in the body, or the X-Specmon-Class header) and "
        "each reply's own figures are logged (llama-server's timings; vLLM's metrics.speculative_decoding, with "
        "--per-request-spec-decode-metrics summary; TabbyAPI's usage.completion_tokens_details), so the view and "
        "log info show acceptance, tokens per step and tok/s per class; an upstream that reports none is said "
        "once. With --plain-upstream (the same model without speculation) the policy routes: each class goes "
        "to the side whose measured goodput is higher, a small share (routing.explore_share) still tries the "
        'other, and every move is a Decision that `specmon policy explain` recomputes; in mode = "advise" a '
        "fixed --plain-share goes plain and nothing is routed. Each side may be a pool: repeat the flag. Both "
        "sides serve the same model, so a side with no upstream answering is a routing fact: its requests go "
        "to the other side until one answers again; a 502 only when nothing answers. GET /metrics is the "
        "proxy's own (per class, side and upstream: docs/metrics.md); the upstream's is at /upstream/metrics.",
    )
    proxy.add_argument(
        "--upstream",
        required=True,
        action="append",
        metavar="URL",
        help="the server with speculation on; repeat for a pool of them (least outstanding requests first)",
    )
    proxy.add_argument(
        "--plain-upstream",
        action="append",
        metavar="URL",
        help="the same model without speculation; repeat for a pool. The policy then routes each class",
    )
    proxy.add_argument(
        "--plain-share",
        type=finite(0.0, 1.0),
        default=0.25,
        metavar="FRACTION",
        help='in mode = "advise" only: of each class\'s requests sent plain, interleaved (default 0.25)',
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
    proxy.add_argument(
        "--idle-timeout",
        type=finite(0.0, above_low=True),
        default=IDLE_TIMEOUT_S,
        metavar="SECONDS",
        help=f"an upstream that sends no byte for this long is hung: its request ends in a 504, it is left out "
        f"until its /health answers (default {IDLE_TIMEOUT_S:.0f}; a reply not streamed gets {WHOLE_REPLY_FACTOR}x, "
        "since it is sent whole at its end)",
    )
    proxy.add_argument(
        "--fresh",
        action="store_true",
        help="route from nothing: ignore the replies earlier sessions kept of this upstream pair (under "
        f"{state_dir() / 'memory'}; this session's still replace them)",
    )
    add_log(proxy)
    proxy.add_argument("--headless", action="store_true", help="print one line per request instead of the TUI")
    proxy.set_defaults(log_keeps="every finished request", handler=lazy("specmon.proxy.command", "run_proxy"))


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
    add_log(watch)
    watch.add_argument("--listen", metavar="127.0.0.1:PORT", help="also serve events over TCP (as run --listen)")
    watch.add_argument("--headless", action="store_true", help="print one line per window instead of the TUI")
    watch.set_defaults(log_keeps="every read", handler=lazy("specmon.watch.command", "run_watch"))
