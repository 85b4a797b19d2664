"""What `specmon serve` answers where issue 51 found it off OpenAI's contract: `created` per
completion, usage against the end token, `ignore_eos` text, `stream_options` checks, malformed HTTP
in the one error shape, and a malformed class name told the naming rule. Real sockets, the real
`openai` client, the tiny model."""

import json
import select
import time

import openai
import pytest

from specmon.events.schema import PromptFinished
from test_serve import HELLO, client, events, serving, stream_text, wait_until
from test_serve_contract import ENDS_AT_50, GREEDY
from test_serve_hostile import connect

SPECIALS = ("<|im_end|>", "<|im_start|>")


def test_created_is_when_each_completion_began_not_when_the_server_started(tmp_path, tiny):
    with serving(tmp_path, tiny, policy=None, draft_len=2) as (server, _):
        started = time.time()
        wait_until(lambda: time.time() >= int(started) + 1.01, "a second after the server started")
        before = int(time.time())
        whole = client(server).chat.completions.create(model="t", messages=HELLO, max_tokens=2)
        _, chunks = stream_text(
            client(server).chat.completions.create(model="t", messages=HELLO, max_tokens=2, stream=True)
        )
        after = int(time.time())
    assert int(started) < before <= whole.created <= after
    assert {c.created for c in chunks} == {chunks[0].created} and before <= chunks[0].created <= after


def test_usage_counts_the_tokens_sent_never_the_end_token(tmp_path, tiny):
    with serving(tmp_path, tiny, policy=None, draft_len=2) as (server, log):
        api = client(server)
        ended = api.chat.completions.create(**GREEDY, messages=ENDS_AT_50, max_tokens=64)
        _, chunks = stream_text(
            api.chat.completions.create(
                **GREEDY, messages=ENDS_AT_50, max_tokens=64, stream=True, stream_options={"include_usage": True}
            )
        )
    generated = events(log, PromptFinished)[0].generated
    eos = tiny[1].tokenizer.eos_id
    assert ended.choices[0].finish_reason == "stop" and generated[-1] == eos
    assert ended.usage.completion_tokens == len(generated) - 1 == chunks[-1].usage.completion_tokens
    assert tiny[1].tokenizer.decode(generated[:-1]) == ended.choices[0].message.content


def test_ignore_eos_keeps_the_templates_markup_out_of_the_text(tmp_path, tiny):
    with serving(tmp_path, tiny, policy=None, draft_len=2) as (server, log):
        past = client(server).chat.completions.create(
            **GREEDY, messages=ENDS_AT_50, max_tokens=96, extra_body={"ignore_eos": True}
        )
    generated = events(log, PromptFinished)[0].generated
    assert tiny[1].tokenizer.eos_id in generated[:-1]  # the model did go past its end token
    assert not any(mark in past.choices[0].message.content for mark in SPECIALS)
    assert past.usage.completion_tokens == len(generated) == 96


@pytest.mark.parametrize(
    "extra, param",
    [
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"stream": True, "stream_options": {"continuous_usage_stats": True}}, "stream_options.continuous_usage_stats"),
        (
            {"stream": True, "stream_options": {"include_usage": True, "every_chunk": True}},
            "stream_options.every_chunk",
        ),
    ],
)
def test_stream_options_without_stream_or_asking_for_what_is_not_done_is_a_400(tmp_path, tiny, extra, param):
    with serving(tmp_path, tiny, policy=None, draft_len=2) as (server, log):
        with pytest.raises(openai.BadRequestError) as refused:
            client(server).chat.completions.create(model="t", messages=HELLO, max_tokens=2, extra_body=extra)
    assert refused.value.status_code == 400 and refused.value.body["param"] == param
    assert events(log, PromptFinished) == []


def send_until_answered(sock, request_bytes: bytes, piece: int = 4096) -> bytes:
    """Send a piece at a time, reading between pieces: a server that answers a head too big and closes
    resets the connection once more arrives, which would lose its answer."""
    answer = b""
    for start in range(0, len(request_bytes), piece):
        sock.sendall(request_bytes[start : start + piece])
        ready, _, _ = select.select([sock], [], [], 0.05)
        if ready:
            break
    while chunk := sock.recv(65536):
        answer += chunk
    return answer


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /v1/models\x1b[2J HTTP/1.1\r\nHost: x\r\n\r\n",  # a raw ESC in the request line
        b"\x00\x01garbage garbage\r\n\r\n",
        b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n",
    ],
    ids=["escape", "garbage", "200kb-header"],
)
def test_malformed_http_is_answered_in_the_one_error_shape(tmp_path, tiny, request_bytes):
    with serving(tmp_path, tiny, policy=None, draft_len=2) as (server, _):
        with connect(server.url) as sock:
            reply = send_until_answered(sock, request_bytes)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and b"content-type: application/json" in head.lower()
    error = json.loads(body)["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_http_request"
    assert "malformed HTTP request" in error["message"]


@pytest.mark.parametrize("name", ["bad\nname", "a" * 41, "\u202echat"])
def test_a_malformed_class_name_is_told_the_naming_rule_under_a_policy(tmp_path, tiny, name):
    with serving(tmp_path, tiny) as (server, _):
        with pytest.raises(openai.BadRequestError) as refused:
            client(server).chat.completions.create(
                model="t", messages=HELLO, max_tokens=2, extra_body={"specmon_class": name}
            )
    message = refused.value.body["message"]
    assert refused.value.body["param"] == "specmon_class"
    assert "1 to 40 letters, digits" in message and "no class" not in message
