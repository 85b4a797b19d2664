"""One request's trip to an upstream: the request sent as the client sent it, and the reply relayed
as it arrives (status, headers and body bytes unchanged), with the proxy's clock read at the reply's
first and last byte and what it says of the request (proxy.evidence) read from copies of the bytes
already sent on."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from dataclasses import dataclass
from collections.abc import AsyncIterator
from typing import Callable

import anyio
import httpx
import msgspec
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from specmon.events.schema import RequestTimed
from specmon.proxy.evidence import Evidence
from specmon.proxy.reader import ReplyReader
from specmon.proxy.usage import UsageCut

HOP_BY_HOP = frozenset(
    b"connection keep-alive proxy-authenticate proxy-authorization te trailer trailers transfer-encoding upgrade".split()
)
# host and length are the new connection's; accept-encoding: a compressed reply could not be read
NOT_SENT_ON = HOP_BY_HOP | {b"host", b"content-length", b"accept-encoding"}
NOT_RELAYED = HOP_BY_HOP | {b"server", b"date"}  # uvicorn writes its own
CLIENT_LEFT, UPSTREAM_BROKE, UPSTREAM_STALLED, UNREACHABLE = 499, 502, 504, 0
CLOCKED = ("arrived", "first_byte", "ended", "evidence")  # an Exchange's fields that RequestTimed says otherwise
DONE, DONE_TIGHT, TAIL_BYTES = b"data: [DONE]", b"data:[DONE]", 64


class UpstreamBroke(Exception):
    """The upstream's reply broke off: raised out of the app so the client's connection is dropped."""


def quiet_upstream_broke(record: logging.LogRecord) -> bool:
    """uvicorn's log filter: it logs an app's exception with its traceback, and UpstreamBroke is logged as a
    502 instead; nor does it print a warning per malformed request a client sends."""
    if record.getMessage().startswith("Invalid HTTP request received"):  # uvicorn's warning
        return False  # a hostile client's garbage: answered 400 by uvicorn, not a line per attempt on stderr
    exc = record.exc_info[1] if record.exc_info else None
    if isinstance(exc, BaseExceptionGroup):  # Starlette streams inside a task group
        return exc.subgroup(UpstreamBroke) is None
    return not isinstance(exc, UpstreamBroke)


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
    routed: str = ""  # the side the policy chose, where the request failed over from it

    def event(self, session_id: str) -> RequestTimed:
        # the reply's figures (predicted_ms: the server's own decode time; the proxy's clock: first_byte_ms, total_ms)
        figures = msgspec.structs.asdict(self.evidence or Evidence())
        figures["accepted_per_pos"] = list(figures["accepted_per_pos"])
        own = {k: v for k, v in vars(self).items() if k not in CLOCKED}  # the rest in RequestTimed's names
        return RequestTimed(
            session_id=session_id,
            t=time.time(),
            first_byte_ms=_ms(self.arrived, self.first_byte),
            total_ms=_ms(self.arrived, self.ended),
            **own,
            **figures,
        )


class Opened:
    """An upstream's reply with its first body bytes already read (or b"" for an empty body): a reply
    that stalls before them can still be a 504, since nothing has gone to the client yet."""

    def __init__(self, reply: httpx.Response, first: bytes, rest: AsyncIterator[bytes]):
        self.reply, self.first, self.rest = reply, first, rest
        self.at = time.perf_counter()  # the first body byte, on the relay's clock

    @classmethod
    async def read(cls, reply: httpx.Response) -> Opened:
        """Raises httpx's TimeoutException where no byte comes within the read deadline."""
        rest = reply.aiter_raw()
        return cls(reply, await anext(rest, b""), rest)


class Relay(StreamingResponse):
    """The upstream's reply, byte for byte as it arrives (a stream less the usage the proxy `asked` for);
    `on_end(exchange)` (None: a path passed through) however it ended: whole, the client gone (499), the
    upstream gone mid-reply (502), or silent past its idle deadline (504, `on_stall` called)."""

    def __init__(
        self,
        opened: Opened,
        exchange: Exchange | None,
        on_end: Callable[[Exchange | None], None],
        asked: bool = False,
        on_stall: Callable[[str], None] = lambda why: None,
        idle_s: float | None = None,
    ):
        reply = opened.reply
        super().__init__(self._relay(opened), status_code=reply.status_code)
        self.reader = ReplyReader(reply.headers.get("content-type", "application/json") if exchange else "")
        self.cut = UsageCut() if asked and self.reader.stream else None
        dropped = NOT_RELAYED | {b"content-length"} if self.cut is not None else NOT_RELAYED
        self.raw_headers = [(k, v) for k, v in reply.headers.raw if k.lower() not in dropped]
        self.reply, self.exchange, self.on_end, self.on_stall = reply, exchange, on_end, on_stall
        self.idle_s = idle_s  # the longest gap between two of the reply's chunks (None: httpx's read deadline)
        self.outcome = CLIENT_LEFT  # until the last byte is sent on
        self._tail = b""  # the last bytes relayed: a stream's `data: [DONE]` ends it for its client
        self._relayed, self._length = 0, int(reply.headers.get("content-length", "-1") or -1)

    async def _relay(self, opened: Opened):
        try:
            if opened.first:
                yield self._passed(opened.first)
            while True:
                async with asyncio.timeout(self.idle_s):  # a gap between a reply's bytes past this: stalled
                    chunk = await anext(opened.rest, None)
                if chunk is None:
                    break
                yield self._passed(chunk)
        except (httpx.TransportError, TimeoutError) as exc:
            stalled = isinstance(exc, (httpx.TimeoutException, TimeoutError))
            why = "timed out" if isinstance(exc, TimeoutError) else reason(exc)
            self.outcome = UPSTREAM_STALLED if stalled else UPSTREAM_BROKE
            if stalled:
                self.on_stall(why)
            raise UpstreamBroke(why) from exc  # uvicorn drops the client: a cut reply must not end as whole
        if self.cut is not None:
            yield self.cut.close()
        self.reader.close()
        self.outcome = self.reply.status_code

    def _passed(self, chunk: bytes) -> bytes:
        self.reader.feed(chunk)  # the reader sees what the upstream sent, usage and all
        self._tail, self._relayed = (self._tail + chunk)[-TAIL_BYTES:], self._relayed + len(chunk)
        return chunk if self.cut is None else self.cut.feed(chunk)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            ended = time.perf_counter()
            # every byte is with the client (its length, or a stream's [DONE]): one that left then (the openai
            # client closes at [DONE]) left nothing unread
            whole = DONE in self._tail or DONE_TIGHT in self._tail or 0 <= self._length <= self._relayed
            if self.outcome == CLIENT_LEFT and whole:
                self.reader.close()
                self.outcome = self.reply.status_code
            try:
                with anyio.CancelScope(shield=True):  # a client that left cancelled the send: close upstream anyway
                    await self.body_iterator.aclose()
                    await self.reply.aclose()
            finally:
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
        if isinstance(cause, socket.gaierror):  # its errno is negative: os.strerror says "unknown error -2"
            return f"cannot resolve the host: {(cause.strerror or str(cause)).lower()}"
        if isinstance(cause, OSError) and cause.errno:
            return os.strerror(cause.errno).lower()
        cause = cause.__cause__ or cause.__context__
    return str(exc) or type(exc).__name__
