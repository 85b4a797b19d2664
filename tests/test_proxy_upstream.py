"""A stand-in for llama-server in the proxy tests: a Starlette app under uvicorn on a free port that
replays the replies recorded from a real llama-server (tests/fixtures/proxy/) byte for byte, a stream
one server-sent event per chunk. It can hold a stream before its last events (to let a client leave
mid-stream) and says whether the proxy hung up on it. Its own tests check that the replay is exact."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import httpx
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

    def __enter__(self) -> FakeUpstream:
        self._served = Threaded(self.app(), self.port).__enter__()
        self.port, self.url = self._served.port, self._served.url
        return self

    def __exit__(self, *exc) -> None:
        self._served.__exit__()


def test_the_fake_replays_the_recorded_stream_byte_for_byte():
    with FakeUpstream() as fake:
        with httpx.stream("POST", f"{fake.url}/v1/chat/completions", json=request_body("chat", stream=True)) as r:
            chunks = list(r.iter_raw())
    assert b"".join(chunks) == recorded("chat-stream.sse")
    assert reply_timings(b"".join(chunks))["draft_n"] == 24


def test_the_recorded_replies_carry_llama_servers_timings():
    for name in ("chat.json", "completion.json", "chat-stream.sse", "completion-stream.sse"):
        timings = reply_timings(recorded(name))
        assert timings["draft_n"] >= timings["draft_n_accepted"] > 0 and timings["predicted_n"] > 0, name
