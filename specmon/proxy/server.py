"""One proxy session's serving: the HTTP client to the upstreams, the app, and uvicorn on a socket
bound before the session opens (a port in use is one line, and port 0 works). Each classified
request's RequestTimed is published on the session's channel from the event loop's thread."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
from dataclasses import dataclass, field
from typing import Callable

import httpx
import msgspec
import uvicorn

from specmon.console import print_error
from specmon.events.schema import Decision
from specmon.memory.store import Memory
from specmon.metrics.unreported import Silence
from specmon.policy.reload import print_reload
from specmon.policy.schema import Policy
from specmon.proxy.app import build_app
from specmon.proxy.deadlines import IDLE_TIMEOUT_S
from specmon.proxy.exported import ProxyMetrics
from specmon.proxy.pool import Pool, Upstream
from specmon.proxy.recall import routes_shelf
from specmon.proxy.relay import UPSTREAM_BROKE, Exchange, quiet_upstream_broke
from specmon.proxy.routing import PLAIN, SPEC, Router
from specmon.proxy.reads import UpstreamReads
from specmon.proxy.tables import request_lines
from specmon.proxy.tally import Tally
from specmon.server.errors import for_terminal
from specmon.server.guard import HEAD_TIMEOUT_S
from specmon.server.runner import OnThread, bind, uvicorn_config

SCRAPE_S = 1.0  # the view's counters move once a second, as `specmon watch`'s do by default
FILES_SPARE = 64  # the log, the socket, the session's channel, the scrapes
MAX_CONNECTIONS_PROXIED = 1024  # each hung client holds one; /health and the other members must still answer


@dataclass
class ProxyOptions:
    upstreams: list[str]  # the side that speculates: one server, or a pool of the same model
    plain_upstreams: list[str] = field(default_factory=list)  # the same model without speculation
    plain_share: float = 0.25  # advise mode's fixed baseline share (enforce: the policy routes)
    host: str = "127.0.0.1"
    port: int = 8001
    api_key: bytes | None = None
    upstream_key: bytes | None = None
    socket: socket.socket | None = None  # already bound (the command binds before opening the session)
    line: Callable[[str], None] | None = None  # the headless line of each request
    scrape_s: float | None = SCRAPE_S  # how often the upstream's /metrics is read (None: never)
    idle_timeout_s: float = IDLE_TIMEOUT_S  # the longest silence from an upstream before it is taken as hung
    memory: Memory | None = None  # where routing keeps what it learned of this pair (None: nothing read or kept)
    families: dict[str, str] = field(default_factory=dict)  # side -> the family it named at start (proxy.recall)


def connection_cap(wanted: int) -> int:
    """`wanted`, the open-files limit raised to make room for it where it can; else as many as it leaves room for."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * wanted + FILES_SPARE  # a client's connection and its upstream's each take one
    if soft != resource.RLIM_INFINITY and soft < need:
        raised = need if hard == resource.RLIM_INFINITY else min(need, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
    return wanted if soft == resource.RLIM_INFINITY else max(1, min(wanted, (soft - FILES_SPARE) // 2))


def upstream_client() -> httpx.AsyncClient:
    """A fresh connection per request: llama-server drops a kept-alive connection after a streamed reply
    without saying so, and the next request on it would fail (seen with build 287); and against a uvicorn
    upstream a kept-alive connection added ~45 ms a request (a delayed-ACK stall), a fresh one ~4 ms."""
    return httpx.AsyncClient(  # each request carries its own deadlines (proxy.app)
        limits=httpx.Limits(max_keepalive_connections=0),
        trust_env=False,
        headers={"accept-encoding": "identity"},  # else httpx asks for gzip, and a gzip reply's timings are unread
    )


class _Uvicorn(uvicorn.Server):
    """uvicorn's, identifying the members and reading /metrics while it serves; the client closed after it."""

    def __init__(self, config: uvicorn.Config, proxying: Proxying):
        super().__init__(config)
        self.proxying, self._tasks = proxying, []

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        self._tasks = [asyncio.create_task(pool.identify()) for pool in self.proxying.pools.values()]
        if self.proxying.options.scrape_s:
            self._tasks.append(asyncio.create_task(self.proxying.reads.run()))

    async def shutdown(self, sockets=None) -> None:
        for task in self._tasks:
            task.cancel()
        for pool in self.proxying.pools.values():
            pool.close()
        await super().shutdown(sockets)
        await self.proxying.client.aclose()


class Proxying(OnThread):
    thread_name = "specmon-proxy-http"

    def __init__(self, session_id: str, publish: Callable, policy: Policy, options: ProxyOptions):
        self.session_id, self.publish, self.options = session_id, publish, options
        self.tally = Tally(plain_given=bool(options.plain_upstreams))  # the end table's running sums: no request kept
        self.told = Silence()  # the headless line's: each silent upstream's notice is told once this session
        say = self.say if options.line else print_error
        self.client = upstream_client()
        sides = {SPEC: options.upstreams, PLAIN: options.plain_upstreams}  # the app's sides: a plain one if given
        self.pools = {side: Pool(side, urls, say, self.client) for side, urls in sides.items() if urls}
        shelf = routes_shelf(options.memory, options.upstreams, options.plain_upstreams)
        self.router = Router(policy, session_id, PLAIN in self.pools, options.plain_share, shelf, options.families)
        self.metrics = ProxyMetrics(self.router, self.pools)  # GET /metrics
        self.socket = options.socket if options.socket is not None else bind(options.host, options.port)
        self.address = self.socket.getsockname()[:2]
        logging.getLogger("uvicorn.error").addFilter(quiet_upstream_broke)  # once, however many proxies start
        config = uvicorn_config(build_app(self), HEAD_TIMEOUT_S, connection_cap(MAX_CONNECTIONS_PROXIED))
        self.reads = UpstreamReads(session_id, publish, options, self.told)
        self.server = _Uvicorn(config, self)
        for decision in self.router.opening:  # what earlier sessions learned of the pair, in force from the start
            self._decided(decision)

    def run(self) -> None:
        """Serve until a signal (or stop())."""
        try:
            self.server.run(sockets=[self.socket])
        finally:
            self.router.remember(final=True)
            self.socket.close()

    def replied(self, exchange: Exchange, member: Upstream | None) -> None:
        """A classified request once its reply is over (`member`: who answered, if one did)."""
        event = exchange.event(self.session_id)
        if member is not None:
            member.outstanding -= 1
            member.family = event.family or member.family  # what to ask it for next time (proxy.usage)
            self.pools[member.side].replied(member, broke=event.status == UPSTREAM_BROKE)
            event = msgspec.structs.replace(event, upstream_url=member.url)
        self.tally.add(event)
        self.metrics.replied(event)
        self.publish(event)
        if self.options.line is not None:
            record, *notice = request_lines(event, self.told, sides=bool(self.options.plain_upstreams))
            for line in [for_terminal(record), *notice]:  # the notice's lines are made safe one by one
                self.options.line(line)
        for decision in self.router.observe(event):
            self._decided(decision)
        self.router.remember()  # as the session goes: a crash loses at most KEEP_EVERY_S of learning

    def _decided(self, decision: Decision) -> None:
        self.metrics.decided(decision)
        self.publish(decision)
        self.say(f"class {decision.prompt_class}: {decision.reason}")

    def reload(self) -> None:
        """Take an edit of the policy file, or refuse it, and publish which."""
        event = self.router.maybe_reload()
        if event is not None:
            self.publish(event)
            if self.options.line is not None:
                print_reload(event)

    def say(self, line: str) -> None:
        if self.options.line is not None:  # headless
            self.options.line(for_terminal(line))
