"""specmon proxy against a stand-in upstream that replays replies recorded from a real llama-server
(upstream.FakeUpstream): the relay is byte for byte, each request is classified, routed and
logged with the timings its reply carried, and what breaks (an upstream down, a client gone) is said."""

from __future__ import annotations

import io
import json
import socket
import threading
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from rich.console import Console
from upstream import FakeUpstream, recorded, reply_timings, request_body
from waiting import wait_until

from specmon.events.log import read_log
from specmon.events.schema import RequestTimed, ServerScraped, SessionStarted
from specmon.policy.schema import load_policy
from specmon.proxy.routing import PLAIN, SPEC
from specmon.proxy.deadlines import IDLE_TIMEOUT_S
from specmon.proxy.server import ProxyOptions, Proxying
from specmon.proxy.tables import log_summary, tally_summary
from events import tally_of
from specmon.transport.session import observed_header, observer_session

POLICY = load_policy("default")
PATHS = {"chat": "/v1/chat/completions", "completion": "/v1/completions"}


@contextmanager
def proxy(
    log: Path,
    upstream: str | list[str],
    plain: str | list[str] | None = None,
    share: float = 0.25,
    api_key=None,
    scrape_s=None,
    upstream_key=None,
    policy=POLICY,
    line=None,
    idle_s: float = IDLE_TIMEOUT_S,
    kind: str = "llama-server",
):
    """A proxy session on a free port, logging to `log`, in front of `upstream` (and `plain`: a URL or a
    pool each); yields the Proxying (its .url). It reads the upstream's /metrics only when `scrape_s` is
    given; `line` takes its headless lines."""
    spec = [upstream] if isinstance(upstream, str) else upstream
    plains = [plain] if isinstance(plain, str) else plain or []
    header = lambda sid: observed_header(sid, "proxy", spec[0], kind, policy)  # noqa: E731
    with observer_session(header, log, serve=False, announce=False) as session:
        options = ProxyOptions(
            spec,
            plains,
            share,
            port=0,
            api_key=api_key,
            scrape_s=scrape_s,
            upstream_key=upstream_key,
            line=line,
            idle_timeout_s=idle_s,
        )
        proxying = Proxying(session.session_id, session.channel.publish, policy, options)
        proxying.start()
        try:
            yield proxying
        finally:
            proxying.stop()


def timed(log: Path) -> list[RequestTimed]:
    return [e for e in read_log(log) if isinstance(e, RequestTimed)]


def streamed(url: str, endpoint: str, **changes) -> bytes:
    with httpx.stream("POST", url + PATHS[endpoint], json=request_body(endpoint, stream=True, **changes)) as r:
        assert r.status_code == 200
        return b"".join(r.iter_raw())


@pytest.fixture
def fake():
    with FakeUpstream() as upstream:
        yield upstream


@pytest.mark.parametrize("endpoint", ["chat", "completion"])
def test_a_streamed_reply_is_byte_identical_through_the_proxy_and_direct(tmp_path, fake, endpoint):
    with proxy(tmp_path / "p.specmon", fake.url) as p:
        through = streamed(p.url, endpoint)
    assert through == streamed(fake.url, endpoint) == recorded(f"{endpoint}-stream.sse")
    (ev,) = timed(tmp_path / "p.specmon")
    sent = reply_timings(through)
    assert (ev.stream, ev.status, ev.endpoint) == (True, 200, endpoint)
    assert (ev.draft_n, ev.draft_n_accepted, ev.predicted_n, ev.predicted_ms) == (
        sent["draft_n"],
        sent["draft_n_accepted"],
        sent["predicted_n"],
        sent["predicted_ms"],
    )
    assert 0 < ev.first_byte_ms <= ev.total_ms


def test_a_json_reply_keeps_its_status_headers_and_bytes(tmp_path, fake):
    with proxy(tmp_path / "p.specmon", fake.url) as p:
        reply = httpx.post(p.url + PATHS["chat"], json=request_body("chat"))
    assert reply.status_code == 200 and reply.content == recorded("chat.json")
    assert reply.headers["content-type"] == "application/json; charset=utf-8"
    assert reply.headers["content-length"] == str(len(recorded("chat.json")))


def test_per_class_totals_in_the_log_equal_the_sums_of_the_timings_the_client_received(tmp_path, fake):
    log = tmp_path / "p.specmon"
    received: dict[str, list[dict]] = {}
    asks = [("chat", False, None), ("completion", True, None), ("chat", True, "code-edit"), ("completion", False, None)]
    with proxy(log, fake.url) as p:
        for endpoint, stream, named in asks * 3:
            headers = {"X-Specmon-Class": named} if named else {}
            body = request_body(endpoint, stream=stream)
            with httpx.stream("POST", p.url + PATHS[endpoint], json=body, headers=headers) as r:
                content = b"".join(r.iter_raw())
            expected_class = named or {"chat": "chat", "completion": "rewrite"}[endpoint]
            received.setdefault(expected_class, []).append(reply_timings(content))
    totals = tally_of(timed(log)).totals
    assert set(totals) == {(name, SPEC) for name in received}
    for name, replies in received.items():
        t = totals[(name, SPEC)]
        assert t.requests == t.timed == len(replies)
        assert t.draft_n == sum(r["draft_n"] for r in replies)
        assert t.draft_n_accepted == sum(r["draft_n_accepted"] for r in replies)
        assert t.predicted_n == sum(r["predicted_n"] for r in replies)
        assert t.predicted_ms == pytest.approx(sum(r["predicted_ms"] for r in replies))
    rows = {tuple(line.split()[:5]) for line in _rendered(tally_summary(tally_of(read_log(log)), POLICY)).splitlines()}
    for (name, upstream), t in totals.items():  # log info's table shows the same sums
        assert (name, upstream, str(t.requests), str(t.draft_n), str(t.draft_n_accepted)) in rows


def test_the_log_names_the_proxy_and_its_upstream(tmp_path, fake):
    with proxy(tmp_path / "p.specmon", fake.url):
        pass
    header = next(iter(read_log(tmp_path / "p.specmon")))
    assert isinstance(header, SessionStarted)
    assert (header.backend, header.profile_name, header.target, header.drafter) == (
        "proxy",
        "proxy",
        fake.url,
        "llama-server",
    )
    assert header.policy_hash == POLICY.sha256


def test_the_upstreams_counters_are_read_into_the_log_while_it_proxies(tmp_path, fake):
    log = tmp_path / "p.specmon"
    with proxy(log, fake.url, scrape_s=0.05):
        wait_until(lambda: fake.metrics_asked >= 3, "three reads of /metrics")
    reads = [e for e in read_log(log) if isinstance(e, ServerScraped)]
    assert len(reads) == 2 and reads[1].t > reads[0].t  # unchanged reads are folded: the first, the last at the end
    assert reads[0].kind == "llama-server" and reads[0].error == "" and reads[0].url == fake.url
    assert reads[0].drafts is not None and reads[0].session_id == next(iter(read_log(log))).session_id


def test_each_class_alternates_on_its_own_count_until_it_is_measured(tmp_path):
    log = tmp_path / "p.specmon"
    with FakeUpstream() as spec, FakeUpstream("-plain") as plain:
        with proxy(log, spec.url, plain.url, share=0.5) as p:
            for endpoint in ["chat", "chat", "completion", "chat", "completion", "chat"]:
                reply = httpx.post(p.url + PATHS[endpoint], json=request_body(endpoint))
                assert reply.status_code == 200
    routed = [(ev.prompt_class, ev.upstream) for ev in timed(log)]
    assert routed == [
        ("chat", SPEC),
        ("chat", PLAIN),
        ("rewrite", SPEC),
        ("chat", SPEC),
        ("rewrite", PLAIN),
        ("chat", PLAIN),
    ]
    assert len(plain.requests) == 3 and len(spec.requests) == 3
    plain_sums = tally_of(timed(log)).totals[("chat", PLAIN)]
    assert (
        plain_sums.draft_n == 0
        and plain_sums.predicted_n == 2 * reply_timings(recorded("chat-plain.json"))["predicted_n"]
    )


def test_an_upstream_that_is_down_is_one_openai_shaped_502_and_is_logged_unreachable(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{sock.getsockname()[1]}"  # bound, never listening: refused
        with proxy(tmp_path / "p.specmon", down) as p:
            reply = httpx.post(p.url + PATHS["chat"], json=request_body("chat", stream=True))
            models = httpx.get(p.url + "/v1/models")
    assert reply.status_code == 502 and models.status_code == 502
    error = reply.json()["error"]
    assert error["type"] == "server_error" and error["code"] == "upstream_unreachable"
    assert "connection refused" in error["message"] and down in error["message"]
    (ev,) = timed(tmp_path / "p.specmon")
    assert (ev.status, ev.predicted_n, ev.first_byte_ms) == (0, None, None)


def test_a_client_that_leaves_mid_stream_ends_the_upstream_request_and_is_logged_as_left(tmp_path, fake):
    log = tmp_path / "p.specmon"
    fake.hold = threading.Event()
    with proxy(log, fake.url) as p:
        with httpx.stream("POST", p.url + PATHS["chat"], json=request_body("chat", stream=True)) as r:
            first = next(r.iter_raw())
            assert first.startswith(b"data: ")
            assert fake.reached_hold.wait(30)
        # the client closed its connection; the proxy hangs up on the upstream, which stops decoding
        assert fake.hung_up.wait(30)
        wait_until(lambda: timed(log), "the request's event")
        fake.hold.set()
        assert streamed(p.url, "chat") == recorded("chat-stream.sse")  # the proxy carries on
    left, whole = timed(log)
    assert (left.status, left.draft_n, left.predicted_n) == (499, None, None)
    assert left.first_byte_ms is not None and whole.status == 200
    assert tally_of([left, whole]).totals[("chat", SPEC)].requests == 1


def test_an_upstream_that_breaks_off_mid_stream_is_cut_for_the_client_too_and_logged_502(tmp_path, fake, caplog):
    """A cut reply must not reach the client as a whole one (a chunked body's end), and is said once, as a 502."""
    fake.break_off = True
    with proxy(tmp_path / "p.specmon", fake.url) as p:
        with pytest.raises(httpx.RemoteProtocolError):
            streamed(p.url, "chat")
        wait_until(lambda: timed(tmp_path / "p.specmon"), "the request's event")
    [broke] = timed(tmp_path / "p.specmon")
    assert (broke.status, broke.draft_n) == (502, None) and broke.first_byte_ms is not None
    assert not [r for r in caplog.records if r.exc_info and "UpstreamBroke" in repr(r.exc_info[1])]


def test_a_client_that_leaves_before_a_json_reply_begins_is_logged_as_left(tmp_path, fake):
    log = tmp_path / "p.specmon"
    fake.hold = threading.Event()
    with proxy(log, fake.url) as p:
        _gives_up(p.url, fake.reached_hold)
        wait_until(lambda: timed(log), "the request's event")
        fake.hold.set()
        assert httpx.post(p.url + PATHS["chat"], json=request_body("chat")).content == recorded("chat.json")
    left, whole = timed(log)
    assert (left.status, left.first_byte_ms, left.predicted_n) == (499, None, None) and left.total_ms > 0
    assert whole.status == 200


def _gives_up(url: str, upstream_has_it: threading.Event) -> None:
    """A client that sends a request and, once the upstream holds it, closes its connection."""
    body = json.dumps(request_body("chat")).encode()
    host, port = httpx.URL(url).host, httpx.URL(url).port
    with socket.create_connection((host, port)) as sock:
        head = f"POST {PATHS['chat']} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        sock.sendall(head.encode() + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        assert upstream_has_it.wait(30)


def test_other_paths_pass_through_unclassified(tmp_path, fake):
    with proxy(tmp_path / "p.specmon", fake.url) as p:
        models = httpx.get(p.url + "/v1/models")
        health = httpx.get(p.url + "/health")
        missing = httpx.get(p.url + "/nowhere")
    assert models.json()["data"][0]["id"] == "smollm2" and health.json() == {"status": "ok"}
    assert missing.status_code == 404  # the upstream's own answer
    assert timed(tmp_path / "p.specmon") == []


def test_a_class_the_policy_lacks_is_refused_as_serve_refuses_it(tmp_path, fake):
    with proxy(tmp_path / "p.specmon", fake.url) as p:
        reply = httpx.post(p.url + PATHS["chat"], json=request_body("chat", specmon_class="nosuch"))
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "specmon_class"
    assert fake.requests == []


def test_the_proxys_api_key_is_checked_and_not_sent_on(tmp_path, fake):
    with proxy(tmp_path / "p.specmon", fake.url, api_key=b"s3cret") as p:
        refused = httpx.post(p.url + PATHS["chat"], json=request_body("chat"))
        taken = httpx.post(p.url + PATHS["chat"], json=request_body("chat"), headers={"Authorization": "Bearer s3cret"})
        models, health = httpx.get(p.url + "/v1/models"), httpx.get(p.url + "/health")
    assert refused.status_code == 401 and taken.status_code == 200
    assert models.status_code == 401 and health.status_code == 200
    assert len(fake.requests) == 1 and "authorization" not in fake.requests[0][2]


def test_the_upstreams_key_is_sent_in_place_of_the_clients(tmp_path, fake):
    """A keyed llama-server: the proxy's own key is the clients', --upstream-api-key-file's is the upstream's."""
    with proxy(tmp_path / "p.specmon", fake.url, api_key=b"s3cret", upstream_key=b"upstr3am") as p:
        taken = httpx.post(p.url + PATHS["chat"], json=request_body("chat"), headers={"Authorization": "Bearer s3cret"})
    assert taken.status_code == 200 and fake.requests[0][2]["authorization"] == "Bearer upstr3am"


def _rendered(renderable) -> str:
    console = Console(file=io.StringIO(), width=100, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def test_the_request_bodies_are_sent_on_unchanged(tmp_path, fake):
    body = request_body("completion", specmon_class="chat")
    with proxy(tmp_path / "p.specmon", fake.url) as p:
        httpx.post(p.url + PATHS["completion"], content=json.dumps(body).encode())
    assert fake.requests[0][1] == body


def test_log_summary_reads_the_policy_from_the_logs_header(tmp_path, fake):
    log = tmp_path / "p.specmon"
    with proxy(log, fake.url) as p:
        httpx.post(p.url + PATHS["completion"], json=request_body("completion"))
    shown = _rendered(log_summary(read_log(log)))
    assert "rewrite spec" in shown and "not yet known" in shown and "nothing is routed" in shown
