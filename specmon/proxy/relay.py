"""One request's trip to an upstream: the request sent as the client sent it, and the reply relayed
as it arrives (status, headers and body bytes unchanged), with the proxy's clock read at the reply's
first and last byte and what it says of the request (proxy.evidence) read from copies of the bytes
already sent on."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Callable

import anyio
import httpx
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from specmon.events.schema import RequestTimed
from specmon.proxy.evidence import Evidence, ReplyReader
from specmon.server.errors import ApiError

HOP_BY_HOP = frozenset(
    b"connection keep-alive proxy-authenticate proxy-authorization te trailer trailers transfer-encoding upgrade".split()
)
# host and length are the new connection's; accept-encoding: a compressed reply could not be read
NOT_SENT_ON = HOP_BY_HOP | {b"host", b"content-length", b"accept-encoding"}
NOT_RELAYED = HOP_BY_HOP | {b"server", b"date"}  # uvicorn writes its own
CLIENT_LEFT, UPSTREAM_BROKE, UNREACHABLE = 499, 502, 0


class UpstreamBroke(Exception):
    """The upstream's reply broke off: raised out of the app so the client's connection is dropped."""


class QuietUpstreamBroke(logging.Filter):
    """uvicorn logs an app's exception with its traceback; this one is logged as a 502 instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and _broke(record.exc_info[1]))


def _broke(exc: BaseException | None) -> bool:
    """UpstreamBroke, or a group holding one (Starlette streams inside a task group)."""
    if isinstance(exc, BaseExceptionGroup):
        return any(_broke(e) for e in exc.exceptions)
    return isinstance(exc, UpstreamBroke)


@dataclass
class Exchange:
    """What a RequestTimed event will say about one classified request."""

    request_id: str
    prompt_class: str
    class_rule: str
    upstream: str
    endpoint: str
    stream: bool
    arrived: float  # the proxy's clock (perf_counter) when the request arrived
    status: int = UNREACHABLE
    first_byte: float | None = None
    ended: float | None = None
    evidence: Evidence | None = None

    def event(self, session_id: str) -> RequestTimed:
        e = self.evidence if self.evidence is not None else Evidence()
        return RequestTimed(
            session_id=session_id,
            t=time.time(),
            request_id=self.request_id,
            prompt_class=self.prompt_class,
            class_rule=self.class_rule,
            upstream=self.upstream,
            endpoint=self.endpoint,
            status=self.status,
            stream=self.stream,
            prompt_n=e.prompt_n,
            prompt_ms=e.prompt_ms,
            predicted_n=e.generated,
            predicted_ms=e.decode_ms,  # the server's own, or None: the proxy's clock is first_byte_ms/total_ms
            draft_n=e.drafted,
            draft_n_accepted=e.accepted,
            first_byte_ms=_ms(self.arrived, self.first_byte),
            total_ms=_ms(self.arrived, self.ended),
            family=e.family,
            spec_steps=e.steps,
            accepted_per_pos=list(e.accepted_per_pos),
        )


def sent_on(request: Request, keep_auth: bool) -> list[tuple[bytes, bytes]]:
    """The client's headers for the upstream; its Authorization only when the proxy did not take it itself."""
    dropped = NOT_SENT_ON if keep_auth else NOT_SENT_ON | {b"authorization"}
    return [(k, v) for k, v in request.headers.raw if k.lower() not in dropped]


async def open_reply(client: httpx.AsyncClient, method: str, url: str, headers, body: bytes) -> httpx.Response:
    """The upstream's reply, its head read and its body not yet; a 502 in the one shape if it cannot be had."""
    try:
        return await client.send(client.build_request(method, url, headers=headers, content=body), stream=True)
    except httpx.TransportError as exc:
        origin = httpx.URL(url).copy_with(path="/", query=None)
        raise ApiError(
            502,
            f"the upstream {str(origin).rstrip('/')} did not answer ({reason(exc)})",
            type="server_error",
            code="upstream_unreachable",
        ) from None


class Relay(StreamingResponse):
    """The upstream's reply, byte for byte as it arrives; `on_end(exchange)` once it is over, however
    it ended (whole, the client gone: 499, or the upstream gone mid-reply: 502)."""

    def __init__(self, reply: httpx.Response, exchange: Exchange | None, on_end: Callable[[Exchange], None]):
        super().__init__(self._relay(), status_code=reply.status_code)
        self.raw_headers = [(k, v) for k, v in reply.headers.raw if k.lower() not in NOT_RELAYED]
        self.reply, self.exchange, self.on_end = reply, exchange, on_end
        self.reader = ReplyReader(reply.headers.get("content-type", "application/json") if exchange else "")
        self.outcome = CLIENT_LEFT  # until the last byte is sent on

    async def _relay(self):
        first = True
        try:
            async for chunk in self.reply.aiter_raw():
                if first and self.exchange is not None:
                    self.exchange.first_byte, first = time.perf_counter(), False
                yield chunk
                self.reader.feed(chunk)  # after the yield: reading never delays a byte
        except httpx.TransportError as exc:
            self.outcome = UPSTREAM_BROKE
            raise UpstreamBroke(reason(exc)) from exc  # uvicorn drops the client: a cut reply must not end as whole
        self.reader.close()
        self.outcome = self.reply.status_code

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            ended = time.perf_counter()
            with anyio.CancelScope(shield=True):  # a client that left cancelled the send: close upstream anyway
                await self.body_iterator.aclose()
                await self.reply.aclose()
            if self.exchange is not None:
                self.exchange.status, self.exchange.ended = self.outcome, ended
                self.exchange.evidence = self.reader.evidence if self.outcome == self.reply.status_code else None
                self.on_end(self.exchange)


def _ms(start: float, end: float | None) -> float | None:
    return None if end is None else (end - start) * 1e3


def reason(exc: httpx.TransportError) -> str:
    """The cause in a few words ("connection refused", "timed out"): the OS error under httpx's, if any."""
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno:
            return os.strerror(cause.errno).lower()
        cause = cause.__cause__ or cause.__context__
    return str(exc) or type(exc).__name__
