"""specmon proxy as a gateway left running in front of real servers (stand-ins on real sockets): a side
that dies is failed over to the other side and taken back when it returns; a member that stalls or is
stopped ends its request in a 504 within the idle timeout, is marked down, and never holds the others;
hundreds of hung requests leave /health and the other side answering; clients that leave at random
points leave no connection or descriptor behind; a family that sends its figures only when asked
(TabbyAPI) is asked by the proxy, every request measured, and the client gets exactly what it asked for."""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import threading
from contextlib import contextmanager
from pathlib import Path

import httpcore
import httpx
import pytest
from standins import TabbyStandin, VllmStandin, from_counts, from_histogram
from test_proxy import PATHS, _rendered, proxy, timed
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from upstream import FakeUpstream, recorded, reply_timings, request_body
from threaded import Threaded
from waiting import wait_until

from specmon.events.log import read_log
from specmon.events.schema import Decision
from specmon.policy.schema import load_policy, parse_policy
from specmon.proxy import pool as pools
from specmon.proxy.orphans import reclaim
from specmon.proxy.server import upstream_client
from specmon.proxy.routing import PLAIN, SPEC
from specmon.proxy.tables import log_summary

DEFAULT = load_policy("default")


def policy(chat: str = "", rewrite: str = ""):
    """The shipped policy in enforce mode, with `chat` and `rewrite` added to those classes' entries."""
    text = DEFAULT.text.replace('mode = "advise"', 'mode = "enforce"')
    text = text.replace('name = "chat"', f'name = "chat"\n{chat}').replace(
        'name = "rewrite"', f'name = "rewrite"\n{rewrite}'
    )
    return parse_policy(text, "t.toml")


@contextmanager
def gateway(log: Path, spec: list[str], plain: list[str], pol, idle_s: float = 120.0):
    """A proxy on a free port in front of `spec` and `plain`; yields (Proxying, its headless lines)."""
    lines: list[str] = []
    with proxy(log, spec, plain, policy=pol, line=lines.append, idle_s=idle_s, kind="") as proxying:
        yield proxying, lines


def chat(url: str, stream: bool = False, name: str = "chat", timeout: float = 60) -> httpx.Response:
    body = request_body("chat", stream=stream)
    return httpx.post(url + PATHS["chat"], json=body, headers={"X-Specmon-Class": name}, timeout=timeout)


class Silent:
    """A server that takes connections and never answers: `headers` sends a stream's head first (a
    member that stalls after its headers); without, it reads and says nothing (a stopped process, whose
    kernel still accepts into the backlog: `accept=False` leaves every connection there)."""

    def __init__(self, headers: bool = False, accept: bool = True):
        self.headers, self.accept = headers, accept
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=2048)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.taken: list[socket.socket] = []
        self._done = threading.Event()

    def __enter__(self) -> Silent:
        if self.accept:
            threading.Thread(target=self._serve, daemon=True).start()
        return self

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self._done.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.taken.append(conn)
            if self.headers:
                conn.recv(65536)
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                )

    def __exit__(self, *exc) -> None:
        self._done.set()
        for conn in self.taken:
            conn.close()
        self.sock.close()


@pytest.fixture
def quick_probes(monkeypatch):
    monkeypatch.setattr(pools, "RETRY_S", 0.1)
    monkeypatch.setattr(pools, "PROBE_TIMEOUT_S", 0.5)


def test_a_class_whose_side_dies_gets_200s_from_the_other_and_goes_back_when_it_returns(tmp_path, quick_probes):
    log = tmp_path / "p.specmon"
    spec, plain = FakeUpstream(), FakeUpstream("-plain")
    with plain, spec, gateway(log, [spec.url], [plain.url], policy(chat='speculate = "on"')) as (p, lines):
        assert [chat(p.url).status_code for _ in range(3)] == [200] * 3
        spec.__exit__()  # killed: its port refuses
        statuses = [chat(p.url, stream=i % 2 == 0).status_code for i in range(50)]
        back = FakeUpstream(port=spec.port).__enter__()
        try:
            wait_until(lambda: len(p.pools[SPEC].up()) == 1, "the spec side's /health answered again")
            after = [chat(p.url).status_code for _ in range(3)]
        finally:
            back.__exit__()
    assert statuses == [200] * 50 and after == [200] * 3
    assert len(plain.requests) == 50 and len(back.requests) == 3
    events = timed(log)
    assert [(e.upstream, e.routed) for e in events] == [(SPEC, "")] * 3 + [(PLAIN, SPEC)] * 50 + [(SPEC, "")] * 3
    assert all(e.status == 200 and e.predicted_n for e in events)
    said = [line for line in lines if "answers" in line or "down" in line]
    assert len(said) == 4, said  # down, failing over, answers again, the side back: each once
    assert "is down (connection refused)" in said[0] and "go to the plain side" in said[1]


def test_a_member_that_stalls_after_its_headers_ends_in_a_504_and_the_others_keep_flowing(tmp_path, quick_probes):
    log = tmp_path / "p.specmon"
    with Silent(headers=True) as stalled, FakeUpstream() as good:
        with gateway(log, [stalled.url, good.url], [], policy(), idle_s=1.0) as (p, lines):
            held = {}
            first = threading.Thread(target=lambda: held.update(reply=chat(p.url, stream=True)))
            first.start()  # both idle: the first member takes it
            wait_until(lambda: p.pools[SPEC].members[0].outstanding == 1, "the stalled member took a request")
            flowing = [chat(p.url, stream=True).status_code for _ in range(5)]  # meanwhile, to the other
            first.join(30)
            after = [chat(p.url).status_code for _ in range(5)]
    assert flowing == [200] * 5 and after == [200] * 5 and not first.is_alive()
    reply = held["reply"]
    assert reply.status_code == 504 and reply.json()["error"]["code"] == "upstream_timeout"
    assert p.pools[SPEC].members[0].sent == 1 and len(good.requests) == 10  # marked down: sent nothing more
    assert any(f"{stalled.url} (spec) is down (timed out)" in line for line in lines)
    events = timed(log)
    assert sorted(e.status for e in events) == [200] * 10 + [504]
    assert "upstream went silent 1" in " ".join(_rendered(log_summary(read_log(log))).split())
    assert [e.upstream_url for e in events if e.status == 504] == [""]


def test_a_stopped_member_is_marked_down_and_stays_down_while_its_health_is_silent(tmp_path, quick_probes):
    log = tmp_path / "p.specmon"
    with Silent(accept=False) as stopped, FakeUpstream() as good:
        with gateway(log, [stopped.url, good.url], [], policy(), idle_s=0.5) as (p, lines):
            replies = [chat(p.url, stream=True) for _ in range(4)]
            assert p.pools[SPEC].members[0].down
    assert [r.status_code for r in replies] == [504, 200, 200, 200]
    assert len(good.requests) == 3 and sum("is down (timed out)" in line for line in lines) == 1


def test_300_hung_requests_leave_health_and_the_other_side_answering(tmp_path):
    log = tmp_path / "p.specmon"
    pol = policy(chat='speculate = "on"', rewrite='speculate = "off"')
    with Silent(accept=False) as stopped, FakeUpstream("-plain") as plain:
        with gateway(log, [stopped.url], [plain.url], pol, idle_s=10.0) as (p, _):
            member = p.pools[SPEC].members[0]

            async def hang() -> list[int]:
                limits = httpx.Limits(max_connections=400)
                async with httpx.AsyncClient(timeout=60, limits=limits) as client:
                    body = request_body("chat", stream=True)
                    asks = [
                        client.post(p.url + PATHS["chat"], json=body, headers={"X-Specmon-Class": "chat"})
                        for _ in range(300)
                    ]
                    return [r.status_code for r in await asyncio.gather(*asks)]

            hung: dict = {}
            runner = threading.Thread(target=lambda: hung.update(statuses=asyncio.run(hang())))
            runner.start()
            wait_until(lambda: member.outstanding == 300, "300 requests held by the stopped member", timeout=30)
            health = httpx.get(p.url + "/health", timeout=10)
            models = httpx.get(p.url + "/v1/models", timeout=10)
            other = chat(p.url, name="rewrite", timeout=10)
            assert member.outstanding == 300  # still held while the others answered
            runner.join(60)
    assert (health.status_code, models.status_code, other.status_code) == (200, 200, 200)
    assert health.json() == {"status": "ok"} and len(plain.requests) == 1
    assert hung["statuses"] == [504] * 300  # each ended at its idle deadline, none held forever


def _open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


def _files() -> list[str]:
    """What each open descriptor is (for a failure's message)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            found.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    return sorted(found)


def _settled_files() -> int | None:
    """The open files' count once it holds for half a second (a warm-up's sockets close a moment later)."""
    first = _open_files()
    threading.Event().wait(0.5)
    return first if _open_files() == first else None


def _leave_at_random(url: str, rng: random.Random, endpoint: str, stream: bool) -> None:
    """A client that sends a request and hangs up at a random point: before its body is whole, before
    the reply, or partway through it."""
    body = json.dumps({"messages": [{"role": "user", "content": "beta please"}], "stream": stream}).encode()
    if endpoint == "completion":
        body = json.dumps({"prompt": "beta please", "stream": stream}).encode()
    host, port = url.removeprefix("http://").split(":")
    head = f"POST {PATHS[endpoint]} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
    head += f"content-length: {len(body)}\r\n\r\n"
    with socket.create_connection((host, int(port))) as conn:
        point = rng.choice(["body", "head", "reply"])
        conn.sendall(head.encode() + (body[: len(body) // 2] if point == "body" else body))
        conn.settimeout(5)
        if point == "reply":
            try:
                conn.recv(rng.randint(1, 2000))
            except TimeoutError:
                pass
        elif point == "head":
            threading.Event().wait(rng.uniform(0.0, 0.3))


def test_clients_that_leave_at_random_points_leave_no_connection_or_descriptor_behind(tmp_path):
    log = tmp_path / "p.specmon"
    slow = lambda body: from_histogram([1, 2, 3], delay_s=0.4)  # noqa: E731
    with VllmStandin(slow) as upstream, gateway(log, [upstream.url], [], policy()) as (p, _):
        assert chat(p.url).status_code == 200  # warmed up: every lazy import and thread is there
        idle = wait_until(lambda: _settled_files(), "the open files settled")
        rng = random.Random(7)
        threads = [
            threading.Thread(target=_leave_at_random, args=(p.url, rng, rng.choice(list(PATHS)), rng.random() < 0.6))
            for _ in range(50)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        member = p.pools[SPEC].members[0]
        wait_until(lambda: member.outstanding == 0, "every upstream request given back", timeout=30)
        assert p.client._transport._pool.connections == []  # httpx's pool holds no upstream connection
        # nor uvicorn a client's, once the loop has seen each client's socket close
        wait_until(lambda: p.server.server_state.connections == set(), "uvicorn holds no client connection")
        wait_until(lambda: _open_files() <= idle, f"open files back to {idle}: {_files()}", timeout=60)
        assert chat(p.url).status_code == 200
    assert _open_files() <= idle


class RecordedTabby(TabbyStandin):
    """TabbyAPI, keeping the bytes of each stream it sent."""

    def __init__(self, figures, draft=True):
        super().__init__(figures, draft)
        self.streams: list[bytes] = []

    async def _paced(self, events, delay_s):
        self.streams.append(b"".join(events))
        async for event in super()._paced(events, delay_s):
            yield event


def _without_usage(stream: bytes) -> bytes:
    """The stream as the client should get it: each event's JSON without its usage member, written as
    the stand-in writes it (compact), an event with no choices left out."""
    out = []
    for event in stream.split(b"\r\n\r\n")[:-1]:
        data = event.removeprefix(b"data: ")
        if data.startswith(b"{") and b'"usage"' in data:
            obj = json.loads(data)
            obj.pop("usage")
            event = b"data: " + json.dumps(obj, separators=(",", ":")).encode()
        out.append(event + b"\r\n\r\n")
    return b"".join(out)


def test_tabbyapi_on_both_sides_with_clients_that_never_ask_is_measured_routed_and_given_what_was_asked(tmp_path):
    log = tmp_path / "p.specmon"
    fast = lambda body: from_counts(30, 6, decode_ms=60.0)  # noqa: E731
    slow = lambda body: from_counts(30, 6, decode_ms=120.0)  # noqa: E731
    with RecordedTabby(fast) as spec, RecordedTabby(slow, draft=False) as plain:
        with gateway(log, [spec.url], [plain.url], policy()) as (p, _):
            wait_until(lambda: all(m.family for pool in p.pools.values() for m in pool.members), "families known")
            received = []
            for i in range(24):
                stream = i % 2 == 0
                body = {"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 32, "stream": stream}
                with httpx.stream("POST", p.url + PATHS["chat"], json=body, headers={"X-Specmon-Class": "chat"}) as r:
                    received.append((stream, r.status_code, b"".join(r.iter_raw())))
    events = timed(log)
    assert len(events) == 24 and all(e.status == 200 and e.predicted_ms is not None for e in events)  # all measured
    assert all(e.draft_n is not None for e in events if e.upstream == SPEC)
    decisions = [e for e in read_log(log) if isinstance(e, Decision)]
    assert decisions and decisions[0].route.side_to == SPEC  # 2x the goodput: the class left alternating
    by_upstream = {SPEC: iter(spec.streams), PLAIN: iter(plain.streams)}
    for (stream, status, raw), ev in zip(received, events):
        assert status == 200
        if stream:
            assert b'"usage"' not in raw and raw == _without_usage(next(by_upstream[ev.upstream]))
        else:
            assert json.loads(raw)["usage"]["completion_tokens"] == ev.predicted_n  # the standard object kept


def _app(handler) -> Starlette:
    return Starlette(routes=[Route(PATHS["chat"], handler, methods=["POST"]), Route("/health", _ok)])


async def _ok(request: Request) -> Response:
    return Response(b"{}", media_type="application/json")


def test_a_stream_its_client_closes_at_done_is_whole_and_measured(tmp_path):
    """The openai client stops reading at `data: [DONE]`; an upstream that holds its body open a moment
    longer must not turn a whole reply into a 'client left'."""
    events = recorded("chat-stream.sse")

    async def lingering(request: Request) -> Response:
        async def body():
            yield events
            await asyncio.sleep(1.0)  # [DONE] sent; the connection's end comes later

        return StreamingResponse(body(), media_type="text/event-stream")

    log = tmp_path / "p.specmon"
    with Threaded(_app(lingering)) as upstream, proxy(log, upstream.url) as p:
        for _ in range(3):
            with httpx.stream("POST", p.url + PATHS["chat"], json=request_body("chat", stream=True)) as r:
                got = b""
                for chunk in r.iter_raw():
                    got += chunk
                    if b"data: [DONE]" in got:
                        break  # and close, as the openai client does
            assert got == events
        wait_until(lambda: len(timed(log)) == 3, "three requests logged")
    timings = reply_timings(events)
    assert [(e.status, e.draft_n, e.predicted_n) for e in timed(log)] == [
        (200, timings["draft_n"], timings["predicted_n"])
    ] * 3


def test_a_stopped_member_ends_a_reply_sent_whole_at_its_idle_timeout_not_ten(tmp_path, quick_probes):
    """A reply not streamed may take 10 idle timeouts; the member's silent /health ends it after one."""
    log = tmp_path / "p.specmon"
    with Silent(accept=False) as stopped, FakeUpstream() as good:
        with gateway(log, [stopped.url, good.url], [], policy(), idle_s=1.0) as (p, lines):
            first = chat(p.url, timeout=5.0)  # held to its own 10 s deadline, this would raise here
            after = [chat(p.url).status_code for _ in range(3)]
    assert first.status_code == 504 and first.json()["error"]["code"] == "upstream_timeout"
    assert after == [200] * 3 and len(good.requests) == 3
    assert sum("is down (timed out)" in line for line in lines) == 1


def test_a_member_whose_replies_all_break_off_is_marked_down_after_five(tmp_path):
    async def truncated(request: Request) -> Response:
        async def body():
            yield b'{"choices": [{"message": {"content": "hel'
            raise RuntimeError("the stand-in breaks off")  # uvicorn drops the connection mid-body

        return StreamingResponse(body(), headers={"content-length": "500"}, media_type="application/json")

    log = tmp_path / "p.specmon"
    with Threaded(_app(truncated)) as broken, FakeUpstream() as good:
        with gateway(log, [broken.url, good.url], [], policy()) as (p, lines):
            for _ in range(16):
                try:
                    chat(p.url, timeout=10)
                except httpx.HTTPError:
                    pass  # a reply cut off reaches its client cut off
            member = p.pools[SPEC].members[0]
            assert member.down
    statuses = [e.status for e in timed(log)]
    assert statuses.count(502) == 5 and statuses.count(200) == 11  # five broke, then the other took them all
    assert any(f"{broken.url} (spec) is down (5 replies in a row broke off)" in line for line in lines)


def test_the_usage_cut_never_holds_a_stream_whole():
    """An event past MAX_EVENT_BYTES is no usage chunk: the cut passes the bytes on from there, all of them."""
    from specmon.proxy.usage import MAX_EVENT_BYTES, UsageCut

    cut, sent, out = UsageCut(), b"x" * 65536, []
    for _ in range(3 * MAX_EVENT_BYTES // len(sent)):
        out.append(cut.feed(sent))
    out.append(cut.close())
    assert b"".join(out) == sent * (3 * MAX_EVENT_BYTES // len(sent))
    assert max(len(o) for o in out) <= MAX_EVENT_BYTES + len(sent) and out[-2] == sent  # passing as it comes


def test_a_busy_member_past_its_idle_timeout_is_waited_for_while_its_health_answers(tmp_path):
    """A queue or a long prefill keeps the first byte back past --idle-timeout: slow is not down."""
    events = recorded("chat-stream.sse")

    async def slow_prefill(request: Request) -> Response:
        async def body():
            await asyncio.sleep(1.5)  # three idle timeouts before the first byte; /health answers meanwhile
            yield events

        return StreamingResponse(body(), media_type="text/event-stream")

    log = tmp_path / "p.specmon"
    with Threaded(_app(slow_prefill)) as busy, gateway(log, [busy.url], [], policy(), idle_s=0.5) as (p, lines):
        replies = [chat(p.url, stream=True, timeout=30) for _ in range(2)]
        assert not p.pools[SPEC].members[0].down
    assert [(r.status_code, r.content) for r in replies] == [(200, events)] * 2
    assert not any("is down" in line for line in lines)


def test_reclaim_takes_out_only_the_connections_no_request_holds():
    """httpcore#1093's orphan (a connection whose request was cancelled before it took it) is closed and
    dropped; a connection a request is waiting on is left alone and its reply still comes."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    async def go():
        client = upstream_client()
        pool = client._transport._pool
        waiting = asyncio.ensure_future(client.get(f"http://127.0.0.1:{port}/health", timeout=10))
        conn, _ = await asyncio.to_thread(listener.accept)  # the request's connection is open, unanswered
        orphan = httpcore.AsyncHTTPConnection(httpcore.Origin(b"http", b"127.0.0.1", port))
        pool._connections.append(orphan)  # as a request cancelled between assignment and connect leaves it
        assert await reclaim(client) == 1
        assert orphan not in pool.connections and len(pool.connections) == 1
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        reply = await waiting
        conn.close()
        await client.aclose()
        return reply.text, pool.connections

    try:
        text, left = asyncio.run(go())
    finally:
        listener.close()
    assert (text, left) == ("ok", [])
