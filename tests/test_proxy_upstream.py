"""The llama-server stand-in (tests/upstream.py) replays what was recorded from a real llama-server, byte
for byte, timings and all."""

import httpx
from upstream import FakeUpstream, recorded, reply_timings, request_body


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
