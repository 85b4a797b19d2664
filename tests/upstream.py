"""The tests' one stand-in for llama-server: a Starlette app under uvicorn on a free port that replays
the replies recorded from a real llama-server (tests/fixtures/proxy/) byte for byte, a stream one
server-sent event per chunk, and serves a /metrics page (a recorded one, or one a test writes, behind
a key if it sets one). It can hold a stream before its last events (to let a client leave mid-stream),
says whether the proxy hung up on it, and stops and starts again on its port (a server going down and
coming back). tests/test_proxy_upstream.py checks that the replay is exact."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

from threaded import Threaded
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "proxy"
JSON = "application/json; charset=utf-8"
ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/completions": "completion"}


def recorded(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def request_body(endpoint: str, **changes) -> dict:
    """The request that was sent when the reply was recorded, with `changes`."""
    return {**json.loads(recorded(f"{endpoint}-request.json")), **changes}


def sse_events(raw: bytes) -> list[bytes]:
    """A recorded stream cut after each event's blank line: the chunks the upstream sends."""
    parts = raw.split(b"\n\n")
    return [p + b"\n\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def reply_timings(body: bytes) -> dict:
    """The timings a client finds in a reply: a JSON body's, or a stream's last event carrying them."""
    if body.startswith(b"data:"):
        found = [json.loads(e[5:]) for e in sse_events(body) if e.startswith(b"data: {")]
        return [f["timings"] for f in found if "timings" in f][-1]
    return json.loads(body)["timings"]


class FakeUpstream:
    """Serves the recorded replies; `hold` (an Event) pauses streams before their last two events, and
    JSON replies before they start."""

    def __init__(self, suffix: str = "", port: int = 0):
        self.suffix = suffix  # "-plain": the replies recorded from a server without speculation
        self.port = port  # 0: any free port; a port again: the same server started again
        self.metrics_page = "llama-server-before.txt"  # recorded by the watch's tests: no drafts yet
        self.metrics_text: str | None = None  # a page a test writes, served instead of metrics_page
        self.metrics_status = 200  # another: /metrics answers it, with no page
        self.api_key: str | None = None  # /metrics answers 401 to a request without `Bearer api_key`
        self.metrics_asked = 0  # GET /metrics answered so far
        self.hold: threading.Event | None = None
        self.hung_up = threading.Event()  # the proxy closed a stream before its end
        self.break_off = False  # streams end without their last two events, the connection dropped
        self.requests: list[tuple[str, dict, dict]] = []  # (path, body, headers) as received
        self.reached_hold = threading.Event()
        self.url = ""

    def app(self) -> Starlette:
        async def complete(request: Request) -> Response:
            body = json.loads(await request.body())
            self.requests.append((request.url.path, body, dict(request.headers)))
            endpoint = ENDPOINTS[request.url.path]
            if body.get("stream"):
                events = sse_events(recorded(f"{endpoint}{self.suffix}-stream.sse"))
                return StreamingResponse(self._stream(events), media_type="text/event-stream")
            await self._held()  # llama-server's JSON reply: its head comes only with the whole reply
            return Response(recorded(f"{endpoint}{self.suffix}.json"), headers={"content-type": JSON})

        async def health(request: Request) -> Response:
            return JSONResponse({"status": "ok"}, headers={"server": "llama.cpp"})

        async def metrics(request: Request) -> Response:
            self.metrics_asked += 1
            if self.api_key is not None and request.headers.get("authorization") != f"Bearer {self.api_key}":
                return Response(b"no", status_code=401)
            if self.metrics_status != 200:
                return Response(b"no", status_code=self.metrics_status)
            if self.metrics_text is not None:
                return Response(self.metrics_text.encode(), media_type="text/plain; version=0.0.4")
            page = FIXTURES.parent / "metrics" / self.metrics_page
            if not page.exists():  # as llama-server without --metrics
                return Response(b"Not Found", status_code=404)
            return Response(page.read_bytes(), media_type="text/plain; version=0.0.4")

        async def models(request: Request) -> Response:
            return JSONResponse({"object": "list", "data": [{"id": "smollm2", "object": "model"}]})

        return Starlette(
            routes=[
                *(Route(path, complete, methods=["POST"]) for path in ENDPOINTS),
                Route("/health", health),
                Route("/v1/models", models),
                Route("/metrics", metrics),
            ]
        )

    async def _held(self) -> None:
        if self.hold is not None:
            self.reached_hold.set()
            await asyncio.to_thread(self.hold.wait, 60)  # a thread's Event; the deadline only stops a hang

    async def _stream(self, events: list[bytes]):
        finished = False
        try:
            for i, event in enumerate(events):
                if i == len(events) - 2:
                    await self._held()
                    if self.break_off:
                        raise RuntimeError("the fake upstream breaks off mid-reply")  # uvicorn drops the connection
                yield event
            finished = True
        finally:
            if not finished:
                self.hung_up.set()

    def start(self) -> FakeUpstream:
        """Serves on `port` (0: a free one); once stopped, on the same port again."""
        self._served = Threaded(self.app(), self.port).__enter__()
        self.port, self.url = self._served.port, self._served.url
        return self

    def stop(self) -> None:
        """Stops serving: its port refuses connections until start()."""
        self._served.__exit__()

    def __enter__(self) -> FakeUpstream:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
