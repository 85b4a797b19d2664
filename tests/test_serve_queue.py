"""The server under load and under abuse: a full queue, a client that leaves mid-stream, every
family of bad request, and /metrics against the log. The decoder is held at a known point by
gating the target's own calls, so every outcome is decided by order, never by timing."""

import errno
import threading
from collections import Counter
from contextlib import contextmanager

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from specmon.events.schema import Decision, PromptFinished, PromptStarted, RoundVerified
from specmon.server.records import short_id
from specmon.transport.channel import LogWriteFailed
from test_serve import HELLO, client, events, rounds_of, serving, wait_until


@contextmanager
def held_prefill(pair):
    """The next prompt's prefill waits until the test lets it go."""
    gate = threading.Event()
    prefill = pair.target.prefill

    def held(tokens):
        gate.wait()
        return prefill(tokens)

    pair.target.prefill = held
    try:
        yield gate
    finally:
        gate.set()
        pair.target.prefill = prefill


@contextmanager
def stepped_rounds(pair):
    """Each round's target pass waits for one release of the semaphore (the prefill, at 0, does not)."""
    steps = threading.Semaphore(0)
    forward = pair.target.forward

    def stepped(tokens, start):
        if start > 0:
            steps.acquire()
        return forward(tokens, start)

    pair.target.forward = stepped
    try:
        yield steps
    finally:
        steps.release(10_000)
        pair.target.forward = forward


def test_eight_clients_answered_in_arrival_order_and_a_ninth_gets_429(tmp_path, tiny):
    _, pair = tiny
    with serving(tmp_path, tiny, max_queue=8) as (server, log), held_prefill(pair) as gate:
        api, worker = client(server), server.worker
        answers: dict[int, object] = {}

        def ask(i: int) -> None:
            answers[i] = api.chat.completions.create(
                model="t", messages=[{"role": "user", "content": f"Question number {i}?"}], max_tokens=6
            )

        threads = []
        for i in range(8):
            threads.append(threading.Thread(target=ask, args=(i,)))
            threads[-1].start()
            wait_until(lambda: worker.held == i + 1, f"request {i} queued")
        with pytest.raises(openai.RateLimitError) as full:
            ask(8)
        gate.set()
        for thread in threads:
            thread.join()
        after = api.chat.completions.create(model="t", messages=HELLO, max_tokens=2)
    assert full.value.status_code == 429 and int(full.value.response.headers["retry-after"]) >= 1
    assert full.value.body["code"] == "rate_limit_exceeded"
    ids = [answers[i].id for i in range(8)]
    assert [e.prompt_id for e in events(log, PromptStarted)] == ids + [after.id]
    assert [e.prompt_id for e in events(log, PromptFinished)] == ids + [after.id]
    for i in range(8):
        rounds = rounds_of(log, ids[i])
        assert answers[i].specmon["round_ids"] == [r.round_id for r in rounds] and len(rounds) >= 1
        assert answers[i].usage.completion_tokens == sum(len(r.emitted) for r in rounds) == 6


def test_a_client_that_leaves_mid_stream_stops_its_decode_within_one_round(tmp_path, tiny):
    _, pair = tiny
    with serving(tmp_path, tiny) as (server, log):
        with stepped_rounds(pair) as steps:
            http = httpx.Client(base_url=server.url, timeout=60)
            body = {"model": "t", "messages": HELLO, "max_tokens": 2000, "stream": True, "temperature": 0}
            with http.stream("POST", "/v1/chat/completions", json=body) as response:
                lines = response.iter_lines()
                assert '"role":"assistant"' in next(lines)
                wait_until(lambda: server.worker.in_flight is not None, "the request is decoding")
                job = server.worker.in_flight
                while not job.text.sent:  # one round at a time until a round has sent text
                    done = len(job.rounds)
                    steps.release()
                    wait_until(lambda: len(job.rounds) > done, "one more round")
                assert any('"content"' in line for line in lines if line.startswith("data:") and '"specmon"' in line)
                http.close()  # the client goes away mid-stream
            wait_until(job.cancelled.is_set, "the server noticed the client left")
            rounds_at_cancel = len(job.rounds)
            steps.release(10_000)
            wait_until(lambda: server.worker.in_flight is not job, "the cancelled decode ended")
        after = client(server).chat.completions.create(model="t", messages=HELLO, max_tokens=3)
    finished = {e.prompt_id: e for e in events(log, PromptFinished)}
    cancelled = finished[job.request.id]
    assert cancelled.stop_reason == "cancelled"
    assert rounds_at_cancel <= cancelled.rounds <= rounds_at_cancel + 1
    assert len(cancelled.generated) < 2000
    assert finished[after.id].stop_reason == "max_new_tokens" and after.usage.completion_tokens == 3


BAD = [  # (what, body or raw bytes, status, param, code)
    ("malformed JSON", b'{"messages": [', 400, None, "invalid_json"),
    ("not an object", b"[1, 2]", 400, None, "invalid_type"),
    ("missing messages", {"model": "t"}, 400, "messages", "missing_required_parameter"),
    ("missing role", {"messages": [{"content": "hi"}]}, 400, "messages[0].role", "missing_required_parameter"),
    ("mistyped max_tokens", {"messages": HELLO, "max_tokens": "ten"}, 400, "max_tokens", "invalid_type"),
    ("temperature out of range", {"messages": HELLO, "temperature": 3}, 400, "temperature", "invalid_value"),
    ("n > 1", {"messages": HELLO, "n": 2}, 400, "n", "unsupported_parameter"),
    ("logprobs", {"messages": HELLO, "logprobs": True}, 400, "logprobs", "unsupported_parameter"),
    ("tools", {"messages": HELLO, "tools": [{"type": "function"}]}, 400, "tools", "unsupported_parameter"),
    (
        "image part",
        {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
        400,
        "messages[0].content[0].type",
        "unsupported_value",
    ),
    ("unknown role", {"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages[0].role", "unsupported_value"),
    ("context exceeded", {"messages": HELLO, "max_tokens": 100_000}, 400, "messages", "context_length_exceeded"),
    ("body too large", {"messages": [{"role": "user", "content": "x" * 5000}]}, 413, None, "request_too_large"),
]


def test_every_bad_request_family_is_refused_and_harms_nothing(tmp_path, tiny):
    _, pair = tiny
    with serving(tmp_path, tiny, max_body_bytes=4096) as (server, log):
        http = httpx.Client(base_url=server.url, timeout=60)
        with held_prefill(pair) as gate:
            in_flight = {}
            thread = threading.Thread(
                target=lambda: in_flight.update(
                    r=http.post("/v1/chat/completions", json={"messages": HELLO, "max_tokens": 5})
                )
            )
            thread.start()
            wait_until(lambda: server.worker.in_flight is not None, "a request in flight")
            for what, body, status, param, code in BAD:
                sent = http.post(
                    "/v1/chat/completions",
                    content=body if isinstance(body, bytes) else None,
                    json=None if isinstance(body, bytes) else body,
                )
                assert sent.status_code == status, (what, sent.text)
                error = sent.json()["error"]
                assert set(error) == {"message", "type", "param", "code"}, what
                assert (error["param"], error["code"]) == (param, code), (what, error)
                assert error["type"] == "invalid_request_error" and error["message"], what
            assert server.worker.held == 1
            gate.set()
            thread.join()
        assert in_flight["r"].status_code == 200
        assert in_flight["r"].json()["usage"]["completion_tokens"] == 5
        for body, param, code in [
            ({"prompt": "hi", "echo": True}, "echo", "unsupported_parameter"),
            ({"prompt": ["a", "b"]}, "prompt", "unsupported_value"),
            ({"prompt": [1, 10**6]}, "prompt", "invalid_value"),
            ({"prompt": ""}, "prompt", "invalid_value"),
            ({"prompt": "hi", "best_of": 3}, "best_of", "unsupported_parameter"),
        ]:
            sent = http.post("/v1/completions", json=body)
            assert sent.status_code == 400 and (sent.json()["error"]["param"], sent.json()["error"]["code"]) == (
                param,
                code,
            ), (body, sent.text)
        missing = http.get("/v1/nothing")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    started = events(log, PromptStarted)
    assert [e.prompt_id for e in started] == [in_flight["r"].json()["id"]]


def test_a_wrong_or_missing_key_is_401(tmp_path, tiny):
    with serving(tmp_path, tiny, api_key=b"s3cret-key") as (server, log):
        with pytest.raises(openai.AuthenticationError) as refused:
            client(server, api_key="s3cret-kez").chat.completions.create(model="t", messages=HELLO, max_tokens=2)
        assert refused.value.status_code == 401 and refused.value.body["code"] == "invalid_api_key"
        http = httpx.Client(base_url=server.url)
        for headers in ({}, {"Authorization": "s3cret-key"}, {"Authorization": "Basic czNjcmV0LWtleQ=="}):
            missing = http.post("/v1/chat/completions", json={"messages": HELLO}, headers=headers)
            assert missing.status_code == 401 and missing.json()["error"]["code"] == "invalid_api_key"
            assert "s3cret" not in missing.text
        assert http.get("/metrics").status_code == 401 and http.get("/v1/models").status_code == 401
        assert http.get("/health").status_code == 200
        ok = client(server, api_key="s3cret-key").chat.completions.create(model="t", messages=HELLO, max_tokens=2)
    assert ok.usage.completion_tokens == 2
    assert [e.prompt_id for e in events(log, PromptStarted)] == [ok.id]


def samples(text: str) -> dict[tuple, float]:
    """{(sample name, sorted labels): value} of a Prometheus exposition, as its parser reads it."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_equal_the_counts_recomputed_from_the_log(tmp_path, tiny):
    prompts = [
        "Rewrite this: the cat sat on the mat, the cat sat on the mat.",
        "Why is the sky blue?",
        "Summarize: a b c a b c a b c",
        "Hello there, how are you today?",
    ] * 3
    with serving(tmp_path, tiny) as (server, log):
        api = client(server)
        for i, text in enumerate(prompts):
            api.chat.completions.create(
                model="t",
                messages=[{"role": "user", "content": text}],
                max_tokens=40,
                temperature=0 if i % 2 else 0.8,
                seed=i,
            )
        exposed = samples(httpx.get(server.url + "/metrics").text)
    expected: Counter = Counter()
    for ev in events(log, RoundVerified):
        labels = (("class", ev.prompt_class), ("k", str(ev.draft_len)))
        expected[("specmon_rounds_total", labels)] += 1
        expected[("specmon_emitted_tokens_total", labels)] += len(ev.emitted)
        expected[("specmon_decode_tokens_total", tuple(sorted(labels + (("clock", "server"),))))] += len(ev.emitted)
        if ev.proposed:
            expected[("specmon_spec_decode_num_drafts_total", labels)] += 1
            expected[("specmon_spec_decode_num_draft_tokens_total", labels)] += len(ev.proposed)
            sent_accepted = min(ev.accepted, len(ev.emitted))  # max_tokens may cut a round's accepted tokens
            expected[("specmon_spec_decode_num_accepted_tokens_total", labels)] += sent_accepted
            expected[("specmon_spec_decode_num_verified_accepted_tokens_total", labels)] += ev.accepted
            for pos in range(len(ev.proposed)):
                key = (
                    "specmon_spec_decode_num_accepted_tokens_per_pos_total",
                    tuple(sorted(labels + (("position", str(pos)),))),
                )
                expected[key] += pos < sent_accepted
    decisions = events(log, Decision)
    for d in decisions:
        expected[("specmon_policy_decisions_total", (("applied", "true"), ("class", d.prompt_class)))] += 1
    finished = events(log, PromptFinished)
    expected[("specmon_generation_tokens_total", ())] = sum(len(f.generated) for f in finished)
    expected[("specmon_requests_total", (("endpoint", "chat"), ("finish_reason", "length")))] = len(prompts)
    counters = {
        k: v
        for k, v in exposed.items()
        if k[0].endswith("_total")
        and not k[0].startswith(
            ("specmon_prompt_tokens", "specmon_round_seconds", "specmon_decode_seconds", "specmon_requests_refused")
        )
    }
    assert counters == dict(expected)
    assert any(k[1] and dict(k[1])["k"] != "0" for k in counters), "some rounds speculated"
    assert exposed[("specmon_queue_depth", ())] == 0 and exposed[("specmon_requests_running", ())] == 0
    ttft = sum(v for k, v in exposed.items() if k[0] == "specmon_time_to_first_token_seconds_count")
    assert ttft == len(prompts)
    assert exposed[("specmon_process_resident_memory_bytes", ())] > 0


def _send_and_leave(url: str, body: dict, stream: bool = False):
    """A raw client that sends a request and keeps the socket for the test to close (the client leaving)."""
    import json
    import socket

    host, port = url.removeprefix("http://").split(":")
    data = json.dumps({**body, "stream": stream}).encode()
    sock = socket.create_connection((host, int(port)))
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data
    )
    return sock


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_is_one_line_and_counted_once(tmp_path, tiny, stream):
    """Leaving while queued: never decoded, so one 499 line and specmon_requests_refused_total{499}.
    Leaving while decoding: the decode's own line says 499 (not 200) and it counts in requests_total
    as cancelled, not as refused too."""
    _, pair = tiny
    lines: list[str] = []
    body = {"messages": HELLO, "max_tokens": 6}
    with serving(tmp_path, tiny, line=lines.append) as (server, log), held_prefill(pair) as gate:
        worker = server.worker
        decoding = _send_and_leave(server.url, body, stream)
        wait_until(lambda: worker.in_flight is not None, "the first request decoding (held at its prefill)")
        job = worker.in_flight
        queued = _send_and_leave(server.url, body, stream)
        wait_until(lambda: len(worker.waiting) == 1, "the second request queued")
        queued.close()
        wait_until(lambda: not worker.waiting, "the queued request withdrawn")
        decoding.close()
        wait_until(job.cancelled.is_set, "the server noticed the decoding client left")
        gate.set()
        wait_until(lambda: worker.in_flight is not job, "the cancelled decode ended")
        wait_until(
            lambda: any(line.startswith("499 /v1") for line in lines), "the withdrawn request's line", timeout=10
        )
        exposed = samples(httpx.get(server.url + "/metrics").text)
    refused = {dict(k[1])["status"]: v for k, v in exposed.items() if k[0] == "specmon_requests_refused_total"}
    assert refused == {"499": 1}, (refused, lines)
    assert exposed[("specmon_requests_total", (("endpoint", "chat"), ("finish_reason", "cancelled")))] == 1
    assert len(lines) == 2, lines
    lines.sort(key=lambda line: not line.startswith("499 /v1"))
    assert lines[0].startswith("499 /v1/chat/completions: the client closed the connection"), lines
    assert lines[1].startswith(f"499 {short_id(job.request.id)} ") and "finish=cancelled" in lines[1], lines
    assert [e.stop_reason for e in events(log, PromptFinished)] == ["cancelled"]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # run() re-raises it, as serve does
def test_a_log_that_fails_when_a_request_is_taken_answers_it_503_and_stops_the_server(tmp_path, tiny, capfd):
    """The first event of a request (its QueueSample) cannot be logged: the request is answered at once,
    not left waiting for the shutdown, and the session ends with the log's own error, raised for the
    CLI to print once (the server prints nothing of it itself)."""
    with pytest.raises(LogWriteFailed, match="No space left on device"):
        with serving(tmp_path, tiny) as (server, log):
            wait_until(lambda: server.worker.thread.is_alive(), "the worker started")
            server.session.sink.error = OSError(errno.ENOSPC, "No space left on device")  # the disk filled up
            with pytest.raises(openai.InternalServerError) as failed:
                client(server).chat.completions.create(model="t", messages=HELLO, max_tokens=4)
            wait_until(lambda: server.worker.failure is not None, "the worker stopped")
    assert failed.value.status_code == 503 and "the server cannot log any more" in failed.value.message
    assert not [e for e in events(log) if isinstance(e, PromptStarted)]  # nothing of it reached the log
    assert "No space left on device" not in capfd.readouterr().err
