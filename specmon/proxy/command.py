"""`specmon proxy`: check every input (the upstream URLs and that they answer, the policy, the key
file, the port), open an observer session whose header names the upstream, and relay requests until
Ctrl-C; headless, a line per request and, at the end, the per-class table and the advice."""

from __future__ import annotations

import sys

import httpx
from rich.markup import escape

from specmon.cli.console import err, out
from specmon.cli.serve import check_host, read_api_key, serve_under_tui
from specmon.errors import SpecmonError
from specmon.policy.schema import load_policy
from specmon.proxy.relay import reason
from specmon.proxy.server import ProxyOptions, Proxying
from specmon.proxy.tables import proxy_summary
from specmon.server.runner import bind
from specmon.transport.session import observed_header, observer_session
from specmon.watch.scrape import base_url

PROBE_TIMEOUT_S = 5.0


def run_proxy(args) -> int:
    upstream = base_url(args.upstream, "--upstream")
    plain = base_url(args.plain_upstream, "--plain-upstream") if args.plain_upstream else None
    policy = load_policy(args.policy or "default")
    api_key = read_api_key(args.api_key_file) if args.api_key_file else None
    upstream_key = (
        read_api_key(args.upstream_api_key_file, "--upstream-api-key-file") if args.upstream_api_key_file else None
    )
    check_host(args.host, api_key is not None)
    kind = probe(upstream, "--upstream")
    if plain is not None:
        probe(plain, "--plain-upstream")
    tui = not args.headless and sys.stdout.isatty() and sys.stdin.isatty()
    listening = bind(args.host, args.port)  # before the session: a port in use opens no log
    try:
        options = ProxyOptions(
            upstream, plain, args.plain_share, args.host, args.port, api_key, upstream_key, listening
        )
        options.line = None if tui else _print_line
        with observer_session(
            lambda sid: observed_header(sid, "proxy", upstream, kind, policy), args.log, viewer=tui
        ) as session:
            proxying = Proxying(session.session_id, session.channel.publish, policy, options)
            _say_where(proxying, upstream, plain, args.plain_share, api_key is not None)
            try:
                if tui:
                    serve_under_tui(session, proxying, f"proxy: {proxying.url}/v1 -> {upstream}", "proxy")
                else:
                    proxying.run()
            finally:  # Ctrl-C (or q in the view) is how a proxy ends: the table is still worth printing
                title = f"requests per class  (log: {session.log_path})"
                out.print(proxy_summary(proxying.requests, policy, title))
    finally:
        listening.close()
    return 0


def probe(url: str, flag: str) -> str:
    """The upstream answers (GET /health): its kind as the watch names it, "" where it does not say."""
    try:
        with httpx.Client(timeout=PROBE_TIMEOUT_S, trust_env=False) as client:
            reply = client.get(f"{url}/health")
    except httpx.TransportError as exc:
        raise SpecmonError(f"{flag} {url}: cannot reach it ({reason(exc)}); is the server running?") from None
    if reply.status_code == 503:
        err.print(f"specmon: {escape(url)} is still loading its model (/health 503); requests wait for it")
    return "llama-server" if reply.headers.get("server", "").startswith("llama.cpp") else ""


def _say_where(proxying: Proxying, upstream: str, plain: str | None, share: float, keyed: bool) -> None:
    baseline = f"; {share:.0%} of each class to {plain}" if plain else ""
    key = "; clients must send the API key" if keyed else ""
    print(f"specmon: proxying {proxying.url}/v1 to {upstream}{baseline}{key}", file=sys.stderr, flush=True)


def _print_line(line: str) -> None:
    print(f"specmon: {line}", flush=True)
