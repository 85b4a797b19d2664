"""The proxy's ASGI app (Starlette): chat and completion requests are classified, routed by the
policy (proxy.routing: the spec or the plain side, each a pool of upstreams) and relayed with their
figures logged; GET /metrics is the proxy's own (proxy.exported); every other path is relayed as it
is: /health and /v1/models to the least busy member of either side, the rest (llama-server's own
endpoints, and the upstream's /metrics at /upstream/metrics) to the speculating side first (a
server's own counters are its own).

The API key, the body limit and the one error shape are `specmon serve`'s (specmon.server.app). `state`
is the Proxying serving the app (proxy.server): its options, pools, client, router and metrics."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Coroutine
from functools import partial
from typing import Callable

import anyio
import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from specmon.proxy.classes import body_fields, request_class
from specmon.proxy.deadlines import CONNECT_TIMEOUT_S, LOOKUP_TIMEOUT_S, WHOLE_REPLY_FACTOR, WRITE_TIMEOUT_S
from specmon.proxy.pool import Pool, Upstream, failed_over, no_reply, send, watched
from specmon.proxy.relay import CLIENT_LEFT, NOT_SENT_ON, UNREACHABLE, UPSTREAM_STALLED, Exchange, Opened, Relay
from specmon.proxy.usage import asking
from specmon.server.app import authorize, class_header, disconnected, error_response, read_body
from specmon.server.errors import ApiError, status_error
from specmon.server.guard import BODY_TIMEOUT_S
from specmon.server.metrics import CONTENT_TYPE
from specmon.watch.scrape import UPSTREAM_PAGE  # the speculating side's own /metrics: the proxy's is its own

MAX_BODY_BYTES = 32 << 20  # llama-server takes long contexts and inline images; a runaway upload still stops
ENDPOINTS = {
    "/v1/chat/completions": "chat",
    "/chat/completions": "chat",
    "/v1/completions": "completion",
    "/completions": "completion",
}
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
ANYONE_PATHS = {"/health", "/v1/models", "/models"}  # the same on every member of either side
LOOKUPS = {"GET", "HEAD"}  # idempotent: one that times out is asked again of another member


def _deadline(read_s: float) -> httpx.Timeout:
    return httpx.Timeout(connect=CONNECT_TIMEOUT_S, read=read_s, write=WRITE_TIMEOUT_S, pool=None)


def build_app(state) -> Starlette:
    async def passed(request: Request) -> Response:
        if request.url.path != "/health":  # as `specmon serve`: a load balancer's health check carries no key
            authorize(request, state.options)
        body = await read_body(request, MAX_BODY_BYTES, BODY_TIMEOUT_S)
        lookup = request.method in LOOKUPS
        idle_s = None if lookup else state.options.idle_timeout_s
        timeout = _deadline(LOOKUP_TIMEOUT_S if lookup else idle_s * WHOLE_REPLY_FACTOR)
        headers, path = _headers(request, state), _path(request)

        def build(member: Upstream) -> httpx.Request:
            return state.client.build_request(
                request.method, member.url + path, headers=headers, content=body, timeout=timeout
            )

        any_side = request.url.path in ANYONE_PATHS  # else a server's own counters: spec's first
        sent = await _unless_client_leaves(request, _open(state, list(state.pools.values()), build, any_side, lookup))
        if sent is None:
            return Response(status_code=CLIENT_LEFT)
        member, opened = sent
        stalled = partial(state.pools[member.side].suspect, member)
        return Relay(opened, None, lambda exchange: _give_back(member), on_stall=stalled, idle_s=idle_s)

    async def metrics(request: Request) -> Response:
        authorize(request, state.options)  # as `specmon serve`'s /metrics
        state.reload()  # a policy edited while no request came: its classes are what it now says
        return Response(state.metrics.exposition(), media_type=CONTENT_TYPE)

    async def api_error(request: Request, exc: ApiError) -> Response:
        if exc.status < 500:  # a 502 or 504 is the upstream's, logged with its request
            state.metrics.refusal(exc.status)
        state.say(f"{exc.status} {request.url.path}: {exc.message}")  # the headless line of a refused request
        return error_response(exc)

    async def http_error(request: Request, exc: HTTPException) -> Response:
        return await api_error(request, status_error(request, exc))

    routes = [Route(path, partial(_classified, state, kind), methods=["POST"]) for path, kind in ENDPOINTS.items()]
    routes += [Route("/metrics", metrics, methods=["GET"]), Route("/{path:path}", passed, methods=METHODS)]
    return Starlette(routes=routes, exception_handlers={ApiError: api_error, HTTPException: http_error})


async def _classified(state, endpoint: str, request: Request) -> Response:
    arrived = time.perf_counter()  # the relay's clock: first and last byte are read on it
    authorize(request, state.options)
    body = await read_body(request, MAX_BODY_BYTES, BODY_TIMEOUT_S)
    state.reload()
    fields = body_fields(body)
    name, rule = request_class(state.router.policy, endpoint, fields, class_header(request))
    side = state.router.side(name)
    exchange = Exchange(
        request_id=uuid.uuid4().hex[:16],
        prompt_class=name,
        class_rule=rule,
        upstream=side,
        endpoint=endpoint,
        stream=fields.get("stream") is True,
        arrived=arrived,
    )
    pools = [state.pools[side], *(pool for other, pool in state.pools.items() if other != side)]
    timeout = _deadline(state.options.idle_timeout_s * WHOLE_REPLY_FACTOR)  # its head and first bytes, watched
    headers, path, asked = _headers(request, state), _path(request), set()

    def build(member: Upstream) -> httpx.Request:
        content = asking(fields, member.family)  # figures its family sends only on request
        if content is not None:
            asked.add(member.url)
        return state.client.build_request(
            "POST", member.url + path, headers=headers, content=content or body, timeout=timeout
        )

    try:
        sent = await _unless_client_leaves(request, _open(state, pools, build))
    except ApiError as exc:
        exchange.status = UPSTREAM_STALLED if exc.status == UPSTREAM_STALLED else UNREACHABLE
        exchange.ended = time.perf_counter()  # how long the client waited for it
        state.replied(exchange, None)  # logged as such
        raise
    if sent is None:  # a reply not begun (llama-server sends a JSON reply's head at its end): the client left first
        exchange.status, exchange.ended = CLIENT_LEFT, time.perf_counter()
        state.replied(exchange, None)
        return Response(status_code=CLIENT_LEFT)
    member, opened = sent
    exchange.upstream, exchange.first_byte = member.side, opened.at
    exchange.routed = side if failed_over(pools[0], member) else ""
    stalled = partial(state.pools[member.side].suspect, member)
    replied = partial(state.replied, member=member)
    return Relay(opened, exchange, replied, member.url in asked, stalled, state.options.idle_timeout_s)


async def _open(
    state, pools: list[Pool], build: Callable[[Upstream], httpx.Request], any_side: bool = False, lookup: bool = False
) -> tuple[Upstream, Opened]:
    """The first member that answers, its reply's first bytes read; else a 504 (they came too late) or a 502."""
    # while it waits (a queue, a prefill): is the member alive
    watch_s = None if lookup else state.options.idle_timeout_s
    member, reply = await send(state.client, pools, build, any_side, retry_timeouts=lookup, watch_s=watch_s)
    try:
        return member, await watched(state.client, member, Opened.read(reply), watch_s)
    except BaseException as exc:
        _give_back(member)
        with anyio.CancelScope(shield=True):
            await reply.aclose()
        if not isinstance(exc, httpx.TransportError):
            raise
        if isinstance(exc, httpx.TimeoutException):
            state.pools[member.side].missed(member, exc)
        raise no_reply(member.url, exc) from None


def _give_back(member: Upstream) -> None:
    member.outstanding -= 1


async def _unless_client_leaves(request: Request, sending: Coroutine) -> tuple[Upstream, Opened] | None:
    """The upstream's reply, opened; None if the client left first (cancelled: the upstream stops decoding)."""
    sending = asyncio.ensure_future(sending)
    gone = asyncio.ensure_future(disconnected(request))
    try:
        await asyncio.wait({sending, gone}, return_when=asyncio.FIRST_COMPLETED)
        if not sending.done():
            sending.cancel()
            await asyncio.wait({sending})  # its reply is closed before the client's slot is given back
            return None
        return sending.result()
    finally:
        gone.cancel()


def _path(request: Request) -> str:
    """The upstream's path: as asked, but the upstream's /metrics for /upstream/metrics."""
    query, path = request.url.query, request.url.path
    path = "/metrics" if path == UPSTREAM_PAGE else path
    return path + (f"?{query}" if query else "")


def _headers(request: Request, state) -> list[tuple[bytes, bytes]]:
    """The client's headers for the upstream; its Authorization only where the proxy neither took nor replaces it."""
    api_key, upstream_key = state.options.api_key, state.options.upstream_key
    dropped = NOT_SENT_ON if api_key is None and upstream_key is None else NOT_SENT_ON | {b"authorization"}
    kept = [(k, v) for k, v in request.headers.raw if k.lower() not in dropped]
    return kept if upstream_key is None else [*kept, (b"authorization", b"Bearer " + upstream_key)]
