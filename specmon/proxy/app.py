"""The proxy's ASGI app (Starlette): chat and completion requests are classified, routed by the
policy (proxy.routing: the spec or the plain side, each a pool of upstreams) and relayed with their
figures logged; every other path (/v1/models, /health, /metrics, llama-server's own endpoints) is
relayed to the speculating side as it is.

The API key, the body limit and the one error shape are `specmon serve`'s (specmon.server.app)."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import Callable

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from specmon.events.schema import PolicyLoaded
from specmon.proxy.classes import body_fields, request_class
from specmon.proxy.pool import Pool, Upstream, send
from specmon.proxy.relay import CLIENT_LEFT, Exchange, Relay, sent_on
from specmon.proxy.routing import SPEC, Router
from specmon.server.app import authorize, class_header, disconnected, error_response, read_body
from specmon.server.errors import ApiError, status_error

MAX_BODY_BYTES = 32 << 20  # llama-server takes long contexts and inline images; a runaway upload still stops
BODY_TIMEOUT_S = 30.0
ENDPOINTS = {
    "/v1/chat/completions": "chat",
    "/chat/completions": "chat",
    "/v1/completions": "completion",
    "/completions": "completion",
}
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


@dataclass
class ProxyState:
    pools: dict[str, Pool]  # "spec" (and "plain") -> its upstreams
    client: httpx.AsyncClient
    router: Router  # the policy: classes, where each goes, hot reload
    on_request: Callable[[Exchange, Upstream | None], None]  # each classified request once its reply is over
    api_key: bytes | None = None
    upstream_key: bytes | None = None  # sent to the upstreams in place of any client's Authorization
    max_body_bytes: int = MAX_BODY_BYTES
    body_timeout_s: float = BODY_TIMEOUT_S
    on_refused: Callable[[str, ApiError], None] | None = None  # the headless line of a refused request
    on_policy: Callable[[PolicyLoaded], None] = lambda event: None  # a reload taken or refused


def build_app(state: ProxyState) -> Starlette:
    async def classified(request: Request) -> Response:
        return await _classified(request, state, ENDPOINTS[request.url.path])

    async def passed(request: Request) -> Response:
        if request.url.path != "/health":  # as `specmon serve`: a load balancer's health check carries no key
            authorize(request, state)
        body = await read_body(request, state.max_body_bytes, state.body_timeout_s)
        member, reply = await send(
            state.client, state.pools[SPEC], request.method, _path(request), _headers(request, state), body
        )
        member.outstanding -= 1  # only classified requests are counted as outstanding: these are short
        return Relay(reply, None, lambda exchange: None)

    async def api_error(request: Request, exc: ApiError) -> Response:
        if state.on_refused is not None:
            state.on_refused(request.url.path, exc)
        return error_response(exc)

    async def http_error(request: Request, exc: HTTPException) -> Response:
        return await api_error(
            request, status_error(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}")
        )

    routes = [Route(path, classified, methods=["POST"]) for path in ENDPOINTS]
    routes.append(Route("/{path:path}", passed, methods=METHODS))
    return Starlette(routes=routes, exception_handlers={ApiError: api_error, HTTPException: http_error})


async def _classified(request: Request, state: ProxyState, endpoint: str) -> Response:
    arrived = time.perf_counter()  # the relay's clock: first and last byte are read on it
    authorize(request, state)
    body = await read_body(request, state.max_body_bytes, state.body_timeout_s)
    reloaded = state.router.maybe_reload()
    if reloaded is not None:
        state.on_policy(reloaded)
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
    sending = asyncio.ensure_future(
        send(state.client, state.pools[side], "POST", _path(request), _headers(request, state), body)
    )
    sent = await _unless_client_leaves(request, sending)
    if sent is None:  # a reply not begun (llama-server sends a JSON reply's head at its end): the client left first
        exchange.status, exchange.ended = CLIENT_LEFT, time.perf_counter()
        state.on_request(exchange, None)
        return Response(status_code=CLIENT_LEFT)
    if isinstance(sent, ApiError):
        state.on_request(exchange, None)  # status 0: unreachable, logged as such
        raise sent
    member, reply = sent
    return Relay(reply, exchange, lambda ended: state.on_request(ended, member))


async def _unless_client_leaves(
    request: Request, sending: asyncio.Future
) -> tuple[Upstream, httpx.Response] | ApiError | None:
    """The upstream's reply head, or None if the client disconnected first (the upstream request is
    then cancelled, so the upstream stops decoding); an unreachable upstream as its ApiError."""
    gone = asyncio.ensure_future(disconnected(request))
    try:
        await asyncio.wait({sending, gone}, return_when=asyncio.FIRST_COMPLETED)
        if not sending.done():
            sending.cancel()
            return None
        try:
            return sending.result()
        except ApiError as exc:
            return exc
    finally:
        gone.cancel()


def _path(request: Request) -> str:
    query = request.url.query
    return request.url.path + (f"?{query}" if query else "")


def _headers(request: Request, state: ProxyState) -> list[tuple[bytes, bytes]]:
    if state.upstream_key is None:
        return sent_on(request, keep_auth=state.api_key is None)
    return [*sent_on(request, keep_auth=False), (b"authorization", b"Bearer " + state.upstream_key)]
