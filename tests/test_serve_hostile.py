"""`specmon serve` against hostile clients: deep nesting, uploads cut short, class names and headers
meant to break the operator's terminal or the metric labels, and connections held open without a
request. Each is a client's fault: a 4xx (or a closed connection), never a 500, and nothing a
client sent reaches the terminal unescaped. Real sockets against a real server on the tiny model."""

import json
import socket
import time

import httpx
import openai
import pytest

from specmon.events.schema import PromptStarted
from test_serve import HELLO, client, events, serving, wait_until
from test_serve_queue import samples


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def raw_post(url: str, body: bytes, headers: str = "") -> bytes:
    """A request as bytes on a socket (for bodies no client library would build); the reply's bytes."""
    with connect(url) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + headers.encode()
            + b"Content-Length: "
            + str(len(body)).encode()
            + b"\r\nConnection: close"
            b"\r\n\r\n" + body
        )
        return read_all(sock)


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=60)


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def refused_by_status(server) -> dict[str, float]:
    exposed = samples(httpx.get(server.url + "/metrics").text)
    return {dict(k[1])["status"]: v for k, v in exposed.items() if k[0] == "specmon_requests_refused_total"}


def closed_by_server(sock: socket.socket, deadline: float) -> bool:
    """True once the server closes the connection (EOF or reset); False if it is still open at the deadline."""
    sock.settimeout(max(0.01, deadline - time.monotonic()))
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


# -- the body -------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["metadata", "tools", "messages[0].tool_calls", "logit_bias"])
def test_json_nested_100000_deep_anywhere_is_a_400(tmp_path, tiny, where):
    nested = deep(100_000)
    body = {"messages": "MESSAGES", "max_tokens": 2}
    message = (
        '{"role": "user", "content": "hi"' + (f', "tool_calls": {nested}' if where.startswith("messages") else "") + "}"
    )
    text = json.dumps(body).replace('"MESSAGES"', f"[{message}]")
    if not where.startswith("messages"):
        text = text[:-1] + f', "{where}": {nested}' + "}"
    lines: list[str] = []
    with serving(tmp_path, tiny, policy=None, draft_len=2, line=lines.append, max_body_bytes=1 << 20) as (server, log):
        reply = raw_post(server.url, text.encode())
        assert (
            client(server).chat.completions.create(model="t", messages=HELLO, max_tokens=2).usage.completion_tokens == 2
        )
        refused = refused_by_status(server)
    status, _, rest = reply.partition(b"\r\n")
    error = json.loads(rest.split(b"\r\n\r\n", 1)[1])["error"]
    assert status == b"HTTP/1.1 400 Bad Request", reply[:300]
    assert error["type"] == "invalid_request_error" and "Traceback" not in reply.decode(errors="replace")
    assert refused == {"400": 1} and not any(line.startswith("500") for line in lines)


def test_a_client_that_leaves_during_its_upload_is_499_not_500(tmp_path, tiny):
    lines: list[str] = []
    with serving(tmp_path, tiny, line=lines.append) as (server, log):
        with connect(server.url) as sock:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 1000\r\n\r\n" + b'{"messages": ['
            )  # then leaves, 986 bytes short
        wait_until(lambda: any(line.startswith("499") for line in lines), "the upload's line")
        refused = refused_by_status(server)
    assert refused == {"499": 1}, (refused, lines)
    assert lines == ["499 /v1/chat/completions: the client closed the connection during its upload"]
    assert not events(log, PromptStarted)


def test_a_body_that_stops_arriving_is_408(tmp_path, tiny):
    with serving(tmp_path, tiny, body_timeout_s=0.5) as (server, log):
        with connect(server.url) as sock:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 100\r\n\r\n" + b'{"messages": ['
            )
            reply = read_all(sock)
        refused = refused_by_status(server)
    assert reply.startswith(b"HTTP/1.1 408 "), reply[:200]
    assert json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "request_timeout"
    assert refused == {"408": 1}


# -- names, headers and what the operator's terminal shows ----------------------------------------


def test_a_class_name_with_a_trailing_newline_is_refused(tmp_path, tiny):
    with serving(tmp_path, tiny, policy=None, draft_len=2) as (server, log):
        api = client(server)
        with pytest.raises(openai.BadRequestError) as refused:
            api.chat.completions.create(model="t", messages=HELLO, max_tokens=2, extra_body={"specmon_class": "evil\n"})
        named = api.chat.completions.create(
            model="t", messages=HELLO, max_tokens=2, extra_body={"specmon_class": "evil"}
        )
        exposed = httpx.get(server.url + "/metrics").text
    assert refused.value.body["param"] == "specmon_class"
    assert named.specmon["prompt_class"] == "evil" and 'class="evil\\n"' not in exposed
    assert [e.prompt_class for e in events(log, PromptStarted)] == ["evil"]


def test_the_class_header_is_read_as_utf8_or_refused(tmp_path, tiny):
    with serving(tmp_path, tiny, policy=None, draft_len=2) as (server, log):
        http = httpx.Client(base_url=server.url, timeout=60)
        body = {"messages": HELLO, "max_tokens": 2}
        cyrillic = http.post("/v1/chat/completions", json=body, headers={"X-Specmon-Class": "код".encode()})
        broken = http.post("/v1/chat/completions", json=body, headers={"X-Specmon-Class": b"\xff\xfe"})
    assert cyrillic.status_code == 400 and "'код'" in cyrillic.json()["error"]["message"], cyrillic.text
    assert broken.status_code == 400 and broken.json()["error"]["param"] == "X-Specmon-Class"


def test_nothing_a_client_sends_reaches_the_operators_terminal_unescaped(tmp_path, tiny):
    lines: list[str] = []
    with serving(tmp_path, tiny, line=lines.append) as (server, log):
        http = httpx.Client(base_url=server.url, timeout=60)
        assert http.get("/%1B%5B2J").status_code == 404
        assert http.get("/a%00b%E2%80%AEc").status_code == 404
        named = http.post(
            "/v1/chat/completions", json={"messages": HELLO, "max_tokens": 2, "specmon_class": "\x1b]0;pwned\x07"}
        )
        wait_until(lambda: len(lines) == 3, "three refusal lines")
    assert named.status_code == 400
    assert lines[0] == "404 /\\x1b[2J: GET /\\x1b[2J: Not Found"
    assert lines[1].startswith("404 /a\\x00b\\u202ec: ")
    assert all(ch.isprintable() for line in lines for ch in line), lines


# -- connections held open ------------------------------------------------------------------------


def test_a_hundred_slow_connections_neither_block_health_and_a_completion_nor_stay_open(tmp_path, tiny):
    with serving(tmp_path, tiny, head_timeout_s=3.0) as (server, log):
        slow = [connect(server.url) for _ in range(100)]
        for sock in slow:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # and the rest of its headers never come
        http = httpx.Client(base_url=server.url, timeout=60)
        assert http.get("/health").json()["status"] == "ok"
        reply = client(server).chat.completions.create(model="t", messages=HELLO, max_tokens=3)
        deadline = time.monotonic() + 60
        still_open = [sock for sock in slow if not closed_by_server(sock, deadline)]
        for sock in slow:
            sock.close()
    assert reply.usage.completion_tokens == 3
    assert still_open == []


def test_a_connection_past_the_cap_is_closed_at_once_and_the_cap_frees_as_they_go(tmp_path, tiny):
    with serving(tmp_path, tiny, max_connections=4, head_timeout_s=120.0) as (server, log):
        held = [connect(server.url) for _ in range(4)]
        wait_until(lambda: len(server.server.server_state.connections) == 4, "four connections open")
        extra = connect(server.url)
        assert closed_by_server(extra, time.monotonic() + 30)
        extra.close()
        for sock in held:
            sock.close()
        wait_until(lambda: not server.server.server_state.connections, "the held connections gone")
        assert httpx.get(server.url + "/health").json()["status"] == "ok"


# -- messages, not records: wrapped to a terminal, whole when piped ---------------------------------


def test_a_refused_requests_line_wraps_to_the_terminal_and_stays_whole_when_piped(tmp_path, tiny, monkeypatch):
    """The trial's 400 line ran to 101 columns on an 80-column terminal; a record's line stays one line."""
    lines: list[str] = []
    with serving(tmp_path, tiny, line=lines.append) as (server, log):
        http = httpx.Client(base_url=server.url, timeout=60)
        monkeypatch.setenv("COLUMNS", "80")
        assert http.post("/v1/chat/completions", json={"messages": HELLO, "n": 2}).status_code == 400
        monkeypatch.delenv("COLUMNS")  # pytest's stdout is no terminal: piped
        assert http.post("/v1/chat/completions", json={"messages": HELLO, "n": 2}).status_code == 400
        wait_until(lambda: len(lines) == 2, "two refusal lines")
    assert lines == [
        "400 /v1/chat/completions: n = 2: specmon decodes one choice per request\n  (batch 1); use n = 1",
        "400 /v1/chat/completions: n = 2: specmon decodes one choice per request (batch 1); use n = 1",
    ]
