"""An upstream's figures are input, not truth (issue 58, point 5): each figure read from a reply is
checked before it is evidence, and one out of range (huge, negative, NaN or infinite, a string, a
decode time no server could take, accepted > drafted) leaves that whole reply unmeasured, with why,
for each family (llama-server's `timings`, vLLM's `metrics.speculative_decoding`, TabbyAPI's
`usage.completion_tokens_details`), JSON and streamed. Reading never raises. End to end, a real proxy
in front of a stand-in that interleaves bad replies with good ones relays every reply byte for byte,
logs the bad ones unmeasured with their reason and no figure, measures the good ones exactly, and says
the upstream's notice once, alike in the headless line, `log info` and the view."""

from __future__ import annotations

import json

import httpx
import msgspec
import pytest
from threaded import Threaded
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from events import request_timed
from test_proxy import proxy, timed
from waiting import wait_until

from specmon.events.log import read_log
from specmon.events.schema import RequestTimed, decode, encode
from specmon.metrics.unreported import Silence, notices
from specmon.proxy.evidence import LLAMA_SERVER, TABBYAPI, VLLM, Evidence
from specmon.proxy.reader import ReplyReader
from specmon.proxy.tables import request_line
from specmon.tui.served_state import ServedState

BIG = str(2**64 + 1)  # the integer that once raised OverflowError while the proxy logged it
HUGE = "1" + "0" * 400  # past a float's range too
ENORMOUS = "9" * 5000  # past what Python converts from a string (4300 digits)
FIGURES = (
    "draft_n",
    "draft_n_accepted",
    "spec_steps",
    "predicted_n",
    "predicted_ms",
    "prompt_n",
    "prompt_ms",
    "accepted_per_pos",
)


# -- each family's reply, its figures given as raw JSON text (so 1e400, NaN and huge integers go as sent) --
def _obj(fields: dict[str, str]) -> str:
    return "{" + ",".join(f'"{k}":{v}' for k, v in fields.items()) + "}"


LLAMA_GOOD = dict(
    prompt_n="12", prompt_ms="5.5", predicted_n="10", predicted_ms="100.0", draft_n="8", draft_n_accepted="6"
)


def llama(timings: dict[str, str], stream: bool) -> bytes:
    if not stream:
        return f'{{"choices":[{{"index":0,"message":{{"content":"hi"}}}}],"timings":{_obj(timings)}}}'.encode()
    events = ['{"choices":[{"index":0,"delta":{"content":"hi"}}]}']
    events.append(f'{{"choices":[{{"index":0,"delta":{{}},"finish_reason":"stop"}}],"timings":{_obj(timings)}}}')
    return b"".join(b"data: " + e.encode() + b"\n\n" for e in [*events, "[DONE]"])


VLLM_GOOD = dict(
    num_draft_tokens="9",
    num_accepted_draft_tokens="7",
    num_spec_steps="3",
    acceptance_histogram="[0,1,0,2]",
    completion_tokens="11",
    generation_time_ms="80.0",
    prompt_tokens="12",
)
USAGE = ("completion_tokens", "prompt_tokens")


def vllm(figures: dict[str, str], stream: bool) -> bytes:
    spec = {k: v for k, v in figures.items() if k not in USAGE and k != "generation_time_ms"}
    metrics = f'{{"generation_time_ms":{figures["generation_time_ms"]},"speculative_decoding":{_obj(spec)}}}'
    usage = _obj({k: figures[k] for k in USAGE})
    if not stream:
        choice = '{"index":0,"message":{"content":"hi"},"finish_reason":"stop","stop_reason":null}'
        return f'{{"choices":[{choice}],"usage":{usage},"metrics":{metrics}}}'.encode()
    events = ['{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}']
    events.append('{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop","stop_reason":null}]}')
    events.append(f'{{"choices":[],"usage":{usage},"metrics":{metrics}}}')
    return b"".join(b"data: " + e.encode() + b"\n\n" for e in [*events, "[DONE]"])


TABBY_GOOD = dict(
    accepted_prediction_tokens="6",
    rejected_prediction_tokens="4",
    completion_tokens="16",
    completion_time="0.12",
    prompt_tokens="12",
    prompt_time="0.01",
)
DETAILS = ("accepted_prediction_tokens", "rejected_prediction_tokens")


def tabby(figures: dict[str, str], stream: bool) -> bytes:
    details = _obj({k: figures[k] for k in DETAILS})
    usage = _obj({k: v for k, v in figures.items() if k not in DETAILS} | {"completion_tokens_details": details})
    if not stream:
        choice = '{"index":0,"message":{"content":"hi"},"finish_reason":"stop"}'
        return f'{{"choices":[{choice}],"usage":{usage}}}'.encode()
    events = ['{"choices":[{"index":0,"delta":{"content":"hi"}}]}', f'{{"choices":[],"usage":{usage}}}']
    return b"".join(b"data: " + e.encode() + b"\r\n\r\n" for e in [*events, "[DONE]"])


SHAPES = {LLAMA_SERVER: (llama, LLAMA_GOOD), VLLM: (vllm, VLLM_GOOD), TABBYAPI: (tabby, TABBY_GOOD)}
MEASURED = {  # what each good reply is evidence of
    LLAMA_SERVER: Evidence(LLAMA_SERVER, 8, 6, None, 10, 100.0, 12, 5.5),
    VLLM: Evidence(VLLM, 9, 7, 3, 11, 80.0, 12, accepted_per_pos=(3, 2, 2)),
    TABBYAPI: Evidence(TABBYAPI, 10, 6, None, 16, 120.0, 12, 10.0),
}

# (family, the figures changed from its good reply, the reason the reply is unmeasured)
BAD = [
    (LLAMA_SERVER, dict(predicted_n=BIG), "predicted_n is past 2**32"),
    (LLAMA_SERVER, dict(prompt_n=ENORMOUS), "prompt_n is past 2**32"),
    (LLAMA_SERVER, dict(predicted_ms=HUGE), "predicted_ms is huge"),
    (LLAMA_SERVER, dict(predicted_ms="1e400"), "predicted_ms is inf"),
    (LLAMA_SERVER, dict(predicted_ms="-1e400"), "predicted_ms is -inf"),
    (LLAMA_SERVER, dict(predicted_ms="NaN"), "predicted_ms is nan"),
    (LLAMA_SERVER, dict(predicted_ms="Infinity"), "predicted_ms is inf"),
    (LLAMA_SERVER, dict(predicted_ms="-31.69"), "predicted_ms is -31.7 ms"),
    (LLAMA_SERVER, dict(predicted_ms="1e-300"), "decode time 1e-300 ms for 10 tokens"),
    (LLAMA_SERVER, dict(prompt_ms="-5"), "prompt_ms is -5 ms"),
    (LLAMA_SERVER, dict(draft_n="-8"), "draft_n is negative"),
    (LLAMA_SERVER, dict(predicted_n='"10"'), "predicted_n is not an integer"),
    (LLAMA_SERVER, dict(predicted_ms='"100"'), "predicted_ms is not a number"),
    (LLAMA_SERVER, dict(draft_n="8.5"), "draft_n is not an integer"),
    (LLAMA_SERVER, dict(draft_n="true"), "draft_n is not an integer"),
    (LLAMA_SERVER, dict(draft_n="4", draft_n_accepted="25"), "accepted 25 > drafted 4"),
    (LLAMA_SERVER, dict(draft_n="100000", draft_n_accepted="6"), "100000 drafted for 10 tokens"),
    (VLLM, dict(num_draft_tokens=BIG), "num_draft_tokens is past 2**32"),
    (VLLM, dict(num_accepted_draft_tokens="-7"), "num_accepted_draft_tokens is negative"),
    (VLLM, dict(num_draft_tokens="4"), "accepted 7 > drafted 4"),
    (VLLM, dict(generation_time_ms="NaN"), "generation_time_ms is nan"),
    (VLLM, dict(generation_time_ms="-80"), "generation_time_ms is -80 ms"),
    (VLLM, dict(generation_time_ms="1e400"), "generation_time_ms is inf"),
    (VLLM, dict(completion_tokens='"11"'), "completion_tokens is not an integer"),
    (VLLM, dict(acceptance_histogram="[0,1,-1,3]"), "acceptance_histogram entry is negative"),
    (VLLM, dict(acceptance_histogram="[0,1,0,5]"), "acceptance_histogram sums to 6, not num_spec_steps 3"),
    (VLLM, dict(acceptance_histogram=f"[0,1,0,{BIG}]"), "acceptance_histogram entry is past 2**32"),
    (VLLM, dict(acceptance_histogram='{"1":1,"300":2}'), "acceptance_histogram has a key that is no draft position"),
    (VLLM, dict(num_draft_tokens="9000", completion_tokens="100000"), "9000 drafted in 3 steps"),
    (VLLM, dict(completion_tokens="100000"), "decode time 80 ms for 100000 tokens"),
    (TABBYAPI, dict(accepted_prediction_tokens=BIG), "accepted_prediction_tokens is past 2**32"),
    (TABBYAPI, dict(rejected_prediction_tokens="-4"), "rejected_prediction_tokens is negative"),
    (TABBYAPI, dict(completion_time="-0.12"), "completion_time is -0.12 s"),
    (TABBYAPI, dict(completion_time="NaN"), "completion_time is nan"),
    (TABBYAPI, dict(completion_time="1e400"), "completion_time is inf"),
    (TABBYAPI, dict(completion_time='"0.12"'), "completion_time is not a number"),
    (TABBYAPI, dict(accepted_prediction_tokens="3000", completion_tokens="2"), "3004 drafted for 2 tokens"),
]


def read(body: bytes, stream: bool, chunk: int = 7) -> Evidence | None:
    """What a ReplyReader makes of `body` fed in small pieces, as the relay feeds it."""
    reader = ReplyReader("text/event-stream" if stream else "application/json")
    for i in range(0, len(body), chunk):
        reader.feed(body[i : i + chunk])
    reader.close()
    return reader.evidence


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("family", list(SHAPES))
def test_a_good_reply_of_each_family_is_measured_exactly(family, stream):
    shape, good = SHAPES[family]
    assert read(shape(good, stream), stream) == MEASURED[family]
    assert MEASURED[family].unmeasured == ""


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize(("family", "bad", "why"), BAD, ids=[f"{f}-{why}" for f, _, why in BAD])
def test_a_figure_out_of_range_leaves_the_whole_reply_unmeasured_with_why(family, bad, why, stream):
    shape, good = SHAPES[family]
    found = read(shape(good | bad, stream), stream)
    assert found == Evidence(family, unmeasured=why)  # the family kept; not one figure
    assert all(getattr(found, name) in (None, ()) for name in FIGURES)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_tabbyapis_time_rounded_to_zero_is_no_time_and_its_draft_counts_stand(stream):
    """TabbyAPI rounds completion_time to 0.01 s: a fast reply says 0, which is no decode time, not a lie."""
    found = read(tabby(TABBY_GOOD | dict(completion_time="0"), stream), stream)
    assert found == msgspec.structs.replace(MEASURED[TABBYAPI], predicted_ms=None)


def test_the_usage_cut_relays_an_event_it_cannot_walk_as_it_came():
    from specmon.proxy.usage import without_usage

    spaced = b'data:  {"choices":[{"index":0}],"usage":{"a":1}}\n\n'  # two spaces: JSON's, not SSE's
    surrogate = b'data: {"choices":[{"index":0,"text":"\\ud800"}],"usage":{"a":1}}\n\n'
    assert without_usage(spaced) in (spaced, b'data:  {"choices":[{"index":0}]}\n\n')
    assert without_usage(surrogate) in (surrogate, b'data: {"choices":[{"index":0,"text":"\\ud800"}]}\n\n')


def test_a_stream_is_unmeasured_by_its_first_bad_event_whatever_comes_after():
    # llama-server can send timings on every chunk: a bad one early is not undone by a good last one
    bad = llama(LLAMA_GOOD | dict(predicted_ms="-1"), stream=True).split(b"data: [DONE]")[0]
    both = bad + llama(LLAMA_GOOD, stream=True)
    assert read(both, stream=True) == Evidence(LLAMA_SERVER, unmeasured="predicted_ms is -1 ms")
    # vLLM: a usage chunk out of range after the finish chunk that named the family
    usage_only = b'data: {"choices":[],"usage":{"completion_tokens":-11,"prompt_tokens":12}}\n\n'
    finish = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop","stop_reason":null}]}\n\n'
    assert read(finish + usage_only + b"data: [DONE]\n\n", stream=True) == Evidence(
        VLLM, unmeasured="completion_tokens is negative"
    )


def test_the_reader_never_raises_into_the_relay(monkeypatch):
    def broken(body: bytes):
        raise RuntimeError("a reading bug")

    monkeypatch.setattr("specmon.proxy.reader.reply_evidence", broken)  # the name the reader calls
    for stream in (True, False):
        reader = ReplyReader("text/event-stream" if stream else "application/json")
        body = SHAPES[LLAMA_SERVER][0](LLAMA_GOOD, stream)
        reader.feed(body)  # the relay feeds between sends: a raise here would cut the client's reply
        reader.feed(body)  # and after a failure it stops reading, quietly
        reader.close()
        assert reader.evidence == Evidence(unmeasured="unreadable (RuntimeError)")


def test_an_unmeasured_reply_logs_and_an_older_log_still_decodes():
    # the OverflowError was msgspec's msgpack encoder refusing a Python int past 2**64 that its JSON decoder had
    # read into an `int` field: the reader now gives no figure out of range, so the event always encodes
    found = read(llama(LLAMA_GOOD | dict(predicted_n=BIG, draft_n=BIG), False), False)
    ev = RequestTimed(
        session_id="s", t=0.0, request_id="r", prompt_class="chat", class_rule="", upstream="spec",
        endpoint="chat", status=200, stream=False, predicted_n=found.predicted_n, draft_n=found.draft_n,
        family=found.family, unmeasured=found.unmeasured,
    )  # fmt: skip
    assert decode(encode(ev)) == ev
    older = msgspec.msgpack.encode(msgspec.msgpack.decode(encode(ev))[:-1])  # written before the field was
    assert decode(older).unmeasured == "" and decode(older).family == LLAMA_SERVER


# -- said once per upstream: the headless line, `log info` and the view fold the same events ---------------
def test_an_upstream_that_sent_figures_out_of_range_is_said_once_and_stays_measured_after():
    url = "http://127.0.0.1:9"
    first = request_timed(upstream_url=url, family=LLAMA_SERVER, unmeasured="accepted 25 > drafted 4")
    again = request_timed(upstream_url=url, family=LLAMA_SERVER, unmeasured="predicted_ms is nan", request_id="b")
    good = request_timed(upstream_url=url, family=LLAMA_SERVER, draft_n=8, draft_n_accepted=6, predicted_n=10)
    plain = request_timed(upstream="plain", upstream_url="http://h:2", unmeasured="predicted_n is past 2**32")
    told = Silence()
    said = [told.observe(ev) for ev in (first, good, again, plain, good)]
    once = f"upstream {url} (spec, llama-server) sent figures out of range (accepted 25 > drafted 4) in 1 reply: "
    once += "it was relayed as sent and left unmeasured"
    other = "upstream http://h:2 (plain, an unrecognised server) sent figures out of range (predicted_n is past "
    other += "2**32) in 1 reply: it was relayed as sent and left unmeasured"
    assert said == [once, None, None, other, None]
    assert notices([first, good, again, plain, good]) == [
        once.replace("1 reply: it was", "2 replies: they were"),
        other,
    ]
    view = ServedState()
    view.apply([first, good, again, good])
    assert view.silence.notices(short=True) == [
        "unmeasured: 127.0.0.1:9 sent figures out of range (accepted 25 > drafted 4)"
    ]
    # an unmeasured reply is not a silent one: no "reports no draft counts" beside it, and its line says so
    assert notices([first]) == [once]
    folded = Silence()
    folded.reply(first)
    assert not folded.silent
    assert request_line(first).split()[3:5] == ["acc=unmeasured", "tokens=-"]
    assert request_line(good).split()[3] == "acc=6/8"


# -- end to end: a real proxy in front of a stand-in whose bad replies are interleaved with good ones -------
class Scripted:
    """A llama-server stand-in on a free port answering each request with the exact bytes scripted for its
    prompt ("r0", "r1", ...): JSON or a stream, as the request asks."""

    def __init__(self, replies: dict[str, bytes]):
        self.replies, self.url = replies, ""

    def app(self) -> Starlette:
        async def complete(request: Request) -> Response:
            body = json.loads(await request.body())
            media = "text/event-stream" if body.get("stream") else "application/json"
            return Response(self.replies[body["messages"][-1]["content"]], media_type=media)

        return Starlette(routes=[Route("/v1/chat/completions", complete, methods=["POST"])])

    def __enter__(self):
        self._served = Threaded(self.app()).__enter__()
        self.url = self._served.url
        return self

    def __exit__(self, *exc) -> None:
        self._served.__exit__()


def good(i: int) -> dict[str, str]:
    """Request i's own good figures, so each is checked against the reply it came from."""
    return LLAMA_GOOD | dict(predicted_n=str(10 + i), predicted_ms=f"{100 + i}.5", draft_n=str(8 + i))


# (streamed, the figures changed from its good ones, the reason it is unmeasured; "" a good one)
SCRIPT = [
    (False, {}, ""),
    (False, dict(predicted_n=BIG), "predicted_n is past 2**32"),  # once an OverflowError, and the next request broke
    (True, {}, ""),
    (True, dict(draft_n="4", draft_n_accepted="25"), "accepted 25 > drafted 4"),
    (False, {}, ""),
    (False, dict(predicted_ms="NaN"), "predicted_ms is nan"),
    (True, dict(predicted_ms="-31.69"), "predicted_ms is -31.7 ms"),
    (True, dict(predicted_ms="1e-300"), "decode time 1e-300 ms for 17 tokens"),
    (False, dict(prompt_n='"12"'), "prompt_n is not an integer"),
    (True, {}, ""),
]


def test_bad_replies_between_good_ones_are_relayed_whole_logged_unmeasured_and_said_once(tmp_path, caplog):
    log, lines = tmp_path / "proxy.log", []
    replies = {f"r{i}": llama(good(i) | bad, stream) for i, (stream, bad, _) in enumerate(SCRIPT)}
    with Scripted(replies) as upstream, proxy(log, upstream.url, line=lines.append) as proxying:
        with httpx.Client(timeout=30, trust_env=False) as client:  # one kept-alive connection for all
            for i, (stream, _, _) in enumerate(SCRIPT):
                body = {"messages": [{"role": "user", "content": f"r{i}"}], "stream": stream}
                with client.stream("POST", proxying.url + "/v1/chat/completions", json=body) as reply:
                    assert (reply.status_code, b"".join(reply.iter_raw())) == (200, replies[f"r{i}"])
        done = lambda: sum(line.startswith("200 ") for line in lines) == len(SCRIPT)  # noqa: E731
        wait_until(done, "every request's line", timeout=10)
    assert not [r for r in caplog.records if r.exc_info]  # nothing raised (an OverflowError once did, logging)
    events = timed(log)
    assert [ev.unmeasured for ev in events] == [why for _, _, why in SCRIPT]
    for i, ((stream, _, why), ev) in enumerate(zip(SCRIPT, events)):
        assert (ev.status, ev.stream, ev.family) == (200, stream, LLAMA_SERVER)
        figures = (ev.prompt_n, ev.prompt_ms, ev.predicted_n, ev.predicted_ms, ev.draft_n, ev.draft_n_accepted)
        assert figures == ((None,) * 6 if why else (12, 5.5, 10 + i, 100 + i + 0.5, 8 + i, 6))
    said = [" ".join(line.split()) for line in lines if not line.startswith("200 ")]  # a notice, unwrapped
    assert said == [
        f"upstream {upstream.url} (spec, llama-server) sent figures out of range (predicted_n is past 2**32) in 1 "
        "reply: it was relayed as sent and left unmeasured"
    ]
    assert sum("acc=unmeasured" in line for line in lines) == 6
    everything = list(read_log(log))
    in_log_info = notices(events)
    assert in_log_info == [said[0].replace("in 1 reply: it was", "in 6 replies: they were")]
    view = ServedState()
    view.apply(everything)
    host = upstream.url.split("://")[1]
    assert view.silence.notices(short=True) == [
        f"unmeasured: {host} sent figures out of range (predicted_n is past 2**32)"
    ]
