"""The proxy's parts without a server: llama-server's timings read from replies cut anywhere, requests classified as
`specmon serve` classifies them, and the advice per class with its interval."""

from __future__ import annotations

import random

import pytest
from upstream import recorded, reply_timings

from specmon.events.schema import RequestTimed
from specmon.policy.schema import load_policy
from specmon.proxy.advice import COSTS, PAYS, UNKNOWN, advise, draft_maximum
from specmon.proxy.classes import body_fields, chat_text, completion_text, request_class
from specmon.proxy.reader import ReplyReader
from events import tally_of
from specmon.server.errors import ApiError
from events import request_timed

POLICY = load_policy("default")


def read(content: bytes, content_type: str, sizes: list[int]) -> dict | None:
    reader = ReplyReader(content_type)
    at = 0
    for size in sizes:
        reader.feed(content[at : at + size])
        at += size
    reader.feed(content[at:])
    reader.close()
    e = reader.evidence
    return None if e is None else dict(zip(TIMINGS, (e.predicted_n, e.predicted_ms, e.draft_n, e.draft_n_accepted)))


TIMINGS = ("predicted_n", "predicted_ms", "draft_n", "draft_n_accepted")  # llama-server's names for them


@pytest.mark.parametrize("name", ["chat-stream.sse", "completion-stream.sse", "chat.json", "completion.json"])
def test_timings_are_read_wherever_the_reply_is_cut(name):
    content = recorded(name)
    kind = "text/event-stream" if name.endswith(".sse") else "application/json; charset=utf-8"
    sent = {k: reply_timings(content)[k] for k in ("predicted_n", "predicted_ms", "draft_n", "draft_n_accepted")}
    rng = random.Random(7)
    assert read(content, kind, []) == sent
    assert read(content, kind, [1] * len(content)) == sent
    for _ in range(20):
        assert read(content, kind, [rng.randint(1, 300) for _ in range(60)]) == sent


def test_a_stream_with_crlf_separators_and_no_timings_and_garbage():
    crlf = recorded("chat-stream.sse").replace(b"\n\n", b"\r\n\r\n")
    assert read(crlf, "text/event-stream", [13] * 900)["draft_n"] == 24
    assert read(b"data: {}\n\ndata: [DONE]\n\n", "text/event-stream", []) is None
    assert read(b'data: {"timings": "soon"}\n\n', "text/event-stream", []) is None
    assert read(b"<html>502</html>", "text/html", []) is None
    assert read(b'[{"timings": {}}]', "application/json", []) is None


def test_the_text_classified_is_the_last_user_message_or_the_prompt():
    chat = {"messages": [{"role": "user", "content": "old"}, {"role": "assistant", "content": "x"}]}
    chat["messages"].append({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url"}]})
    assert chat_text(chat) == "a"
    assert chat_text({"messages": "nope"}) == chat_text({}) == ""
    assert completion_text({"prompt": ["p", "q"]}) == "p" and completion_text({"prompt": [1, 2]}) == ""
    assert body_fields(b"[1]") == body_fields(b"{not json") == {}


def test_a_named_class_wins_over_the_text_and_an_unknown_one_is_a_400():
    code = {"prompt": "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n"}
    assert request_class(POLICY, "completion", code, None)[0] == "rewrite"
    assert request_class(POLICY, "completion", {**code, "specmon_class": "chat"}, "code-edit")[0] == "chat"
    assert request_class(POLICY, "completion", code, "code-edit")[0] == "code-edit"
    with pytest.raises(ApiError) as refused:
        request_class(POLICY, "chat", {"specmon_class": "nosuch"}, None)
    assert refused.value.status == 400 and refused.value.param == "specmon_class"


def requests(prompt_class: str, upstream: str, tok_per_s: float, n: int, seed: int) -> list[RequestTimed]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        tokens = rng.randint(20, 60)
        out.append(
            request_timed(
                request_id=f"{prompt_class}-{upstream}-{i}",
                prompt_class=prompt_class,
                upstream=upstream,
                predicted_n=tokens,
                predicted_ms=tokens / tok_per_s * 1e3 * rng.uniform(0.9, 1.1),
                draft_n=tokens if upstream == "spec" else None,
                draft_n_accepted=tokens // 2 if upstream == "spec" else None,
            )
        )
    return out


def test_the_advice_says_pays_costs_or_not_yet_known_from_the_interval():
    events = requests("chat", "spec", 20, 10, 1) + requests("chat", "plain", 12, 10, 2)
    events += requests("rewrite", "spec", 9, 10, 3) + requests("rewrite", "plain", 10, 10, 4)
    events += requests("code-edit", "spec", 15, 3, 5) + requests("code-edit", "plain", 14.5, 1, 6)
    events += requests("non-english", "spec", 15, 3, 7)
    found = {a.prompt_class: a for a in advise(tally_of(events))}
    assert [found[c].verdict for c in ("chat", "rewrite", "code-edit", "non-english")] == [
        PAYS,
        COSTS,
        UNKNOWN,
        UNKNOWN,
    ]
    chat = found["chat"].estimate
    assert (
        chat.low > 1.0 and chat.low <= chat.ratio <= chat.high and (chat.prompts_spec, chat.prompts_plain) == (10, 10)
    )
    assert found["code-edit"].estimate.low is None  # one plain request: no interval
    assert found["rewrite"].change(POLICY) == 'would set speculate = "off"'
    assert found["chat"].change(POLICY).startswith("keep speculation on, draft maximum")
    # other classes went plain, so the plain side was given: the advice never asks for it
    assert found["non-english"].change(POLICY) == "none (none of its requests went to the plain side yet)"
    (alone,) = advise(tally_of(requests("non-english", "spec", 15, 3, 7)))
    assert "give --plain-upstream" in alone.change(POLICY)


def test_a_draft_maximum_keeps_positions_accepted_at_least_a_tenth_of_the_time():
    assert draft_maximum(None) is None and draft_maximum(1.0) is None
    assert draft_maximum(0.5) == 3  # 0.5^3 = 0.125; 0.5^4 = 0.06
    assert draft_maximum(0.9) == 21 and draft_maximum(0.05) == 1


def test_an_upstream_whose_host_does_not_resolve_is_said_so_in_words():
    """A DNS failure's errno is negative: os.strerror would call it "unknown error -2"."""
    import socket

    import httpx

    from specmon.proxy.relay import reason

    try:
        socket.getaddrinfo("upstream.invalid", 8080)  # .invalid never resolves (RFC 2606)
    except socket.gaierror as exc:
        failed = exc
    else:
        pytest.skip("this host's resolver answers for .invalid")
    try:
        raise httpx.ConnectError("[Errno -2] Name or service not known") from failed
    except httpx.ConnectError as exc:
        said = reason(exc)
    assert said.startswith("cannot resolve the host: ") and "unknown error" not in said
    assert said == said.lower() and failed.strerror.lower() in said
