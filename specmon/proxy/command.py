"""`specmon proxy`: check every input (the upstream URLs and that they answer, the policy, the key
file, the port), open an observer session whose header names the upstream, and relay requests until
Ctrl-C; headless, a line per request and, at the end, the per-class table and the advice."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import httpx
from rich.console import Group
from rich.markup import escape

from specmon.console import err, out, print_line, wants_tui
from specmon.text import Hanging
from specmon.errors import SpecmonError
from specmon.memory.store import Memory
from specmon.policy.schema import load_policy
from specmon.proxy.reads import family_at, family_of
from specmon.proxy.pool import PROBE_TIMEOUT_S
from specmon.proxy.relay import reason
from specmon.proxy.routing import PLAIN, SPEC
from specmon.proxy.server import ProxyOptions, Proxying
from specmon.proxy.tables import tally_summary
from specmon.server.auth import check_host, read_api_key
from specmon.server.runner import bind, interrupt_when_up
from specmon.transport.session import observed_header, observer_session
from specmon.tui.beside import serve_under_tui
from specmon.watch.scrape import base_url


def run_proxy(args) -> int:
    upstreams = [base_url(url, "--upstream") for url in args.upstream]
    plain = [base_url(url, "--plain-upstream") for url in args.plain_upstream or []]
    policy = load_policy(args.policy or "default")
    api_key = read_api_key(args.api_key_file) if args.api_key_file else None
    upstream_key = args.upstream_api_key_file and read_api_key(args.upstream_api_key_file, "--upstream-api-key-file")
    check_host(args.host, api_key is not None)
    kind = probe_pool(upstreams, "--upstream")
    plain_kind = probe_pool(plain, "--plain-upstream") if plain else ""
    tui = wants_tui(args)
    listening = bind(args.host, args.port)  # before the session: a port in use opens no log
    try:
        options = ProxyOptions(
            upstreams, plain, args.plain_share, args.host, args.port, api_key, upstream_key, listening
        )
        options.line = None if tui else print_line
        options.idle_timeout_s = args.idle_timeout
        options.memory = Memory(fresh=args.fresh)  # routing starts from what it learned of this pair before
        options.families = {SPEC: kind, PLAIN: plain_kind}
        header = partial(observed_header, backend="proxy", target=upstreams[0], kind=kind, policy=policy)
        with observer_session(header, args.log, viewer=tui, rotation=args.rotation) as session:
            proxying = Proxying(session.session_id, session.channel.publish, policy, options)
            try:
                if tui:
                    _say_where(proxying)
                    serve_under_tui(session, proxying, f"proxy: {proxying.url}/v1 -> {upstreams[0]}", "proxy")
                else:
                    with interrupt_when_up(proxying.server):
                        _say_where(proxying)
                        proxying.run()
            finally:  # Ctrl-C (or q in the view) is how a proxy ends: the table is still worth printing
                out.print(end_of_proxy(proxying, session.log_path))
    finally:
        listening.close()
    return 0


def end_of_proxy(proxying: Proxying, log_path: Path) -> Group:
    """The per-class table and the advice, in the light of the last read that found the upstream's counters
    (one that failed, the upstream stopped first, says nothing of its drafting), then `log: PATH` on a line
    of its own, whole where it fits (in the table's title it wrapped at column 0 between `(log:` and it)."""
    if proxying.reads.last_counted is not None:
        proxying.tally.add(proxying.reads.last_counted)  # adding it twice is harmless
    logged = f"log: {log_path}"
    return Group(tally_summary(proxying.tally, proxying.router.policy), Hanging(logged, whole=[logged]))


def probe_pool(urls: list[str], flag: str) -> str:
    """Every upstream of a side answers, or the side still has one that does (the others are said and
    left to the pool's retries); the first answer's kind."""
    kinds, down = [], []
    for url in urls:
        try:
            kinds.append(probe(url, flag))
        except SpecmonError as exc:
            if len(urls) == 1:
                raise
            down.append(str(exc))
    if not kinds:
        raise SpecmonError(f"{flag}: none of the {len(urls)} upstreams answers ({down[0]})")
    for line in down:
        err.print(f"specmon: {escape(line)}: left out until it answers")
    return kinds[0]


def probe(url: str, flag: str) -> str:
    """The family of an upstream that answers GET /health (that, else /v1/models, names it; "" neither)."""
    try:
        with httpx.Client(timeout=PROBE_TIMEOUT_S, trust_env=False) as client:
            reply = client.get(f"{url}/health")
            if reply.status_code == 503:
                err.print(f"specmon: {escape(url)} is still loading its model (/health 503); requests wait for it")
            return family_of(reply) or (family_at(client, url, ("/v1/models",)) if reply.status_code != 503 else "")
    except httpx.TransportError as exc:
        why = reason(exc)
        hint = "is the host name right?" if why.startswith("cannot resolve") else "is the server running?"
        raise SpecmonError(f"{flag} {url}: cannot reach it ({why}); {hint}") from None


def _say_where(proxying: Proxying) -> None:
    options, policy = proxying.options, proxying.router.policy
    spec, plain = options.upstreams, options.plain_upstreams
    where = spec[0] if len(spec) == 1 else f"{len(spec)} upstreams ({', '.join(spec)})"
    if not plain:
        routed = ""
    elif policy.settings.mode == "advise":
        routed = f"; advise mode: {options.plain_share:.0%} of each class to {', '.join(plain)}, routing nothing"
    else:
        routed = (
            f"; the policy routes each class to {', '.join(plain)} or not, by measured goodput "
            f"({policy.routing.explore_share:.0%} explores the other side)"
        )
    key = "; clients must send the API key" if options.api_key is not None else ""
    print(f"specmon: proxying {proxying.url}/v1 to {where}{routed}{key}", file=sys.stderr, flush=True)
