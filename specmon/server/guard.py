"""The HTTP connection, guarded against clients that hold it without finishing a request: uvicorn's
h11 protocol with a deadline for each request's head (its request line and headers, which uvicorn
itself never times out: a byte every few seconds kept its keep-alive timer from firing) and a cap
on open connections, past which a new one is closed at once. Bodies have their own deadline in
the app (a 408 in the one error shape), since only the app knows when it reads one."""

from __future__ import annotations

import asyncio
from contextlib import suppress

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from specmon.server.errors import ApiError

HEAD_TIMEOUT_S = 10.0  # a request line and headers take one packet from any client worth serving
BODY_TIMEOUT_S = 30.0  # a 1 MiB body over a slow link, with room to spare
MAX_CONNECTIONS = 256  # far above batch-1 serving's needs, far below a process's descriptors


class GuardedH11(H11Protocol):
    def __init__(self, *args, head_timeout_s: float, max_connections: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.head_timeout_s, self.max_connections = head_timeout_s, max_connections
        self._head_deadline: asyncio.TimerHandle | None = None
        self._waiting_for = None  # the cycle in progress when the deadline was set: a new one means a new head

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            transport.close()  # over the cap: refused before a byte is read
            return
        self._await_head()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.cycle is not self._waiting_for:  # a whole head arrived and its request started
            self._cancel_head_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._await_head()  # a kept-alive connection owes its next head by the same deadline

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_deadline()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """A request h11 cannot parse (a bad request line, a head over h11's size limit), answered in the
        one error shape where uvicorn answers plain text ("Invalid HTTP request received.")."""
        body = ApiError(
            400,
            "malformed HTTP request: its request line or headers cannot be parsed, or they pass "
            f"{self.conn._max_incomplete_event_size // 1024} KiB",
            code="invalid_http_request",
        ).body()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        with suppress(h11.LocalProtocolError):  # a response already under way: nothing more can be said on it
            head = self.conn.send(h11.Response(status_code=400, headers=headers, reason=b"Bad Request"))
            self.transport.write(head + self.conn.send(h11.Data(data=body)) + self.conn.send(h11.EndOfMessage()))
        self.transport.close()

    def _await_head(self) -> None:
        self._cancel_head_deadline()
        self._waiting_for = self.cycle
        self._head_deadline = self.loop.call_later(self.head_timeout_s, self._head_too_slow)

    def _cancel_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()  # a no-op once it has fired

    def _head_too_slow(self) -> None:
        if not self.transport.is_closing():
            with suppress(h11.LocalProtocolError):  # mid-head: h11 has nothing to close politely
                self.conn.send(h11.ConnectionClosed())
            self.transport.close()
