"""specmon proxy in front of vLLM and TabbyAPI (tests/standins.py: their own reply shapes, on real
sockets), streamed and not, several classes: the log's RequestTimed events and `log info` hold exactly
the drafted and accepted sums the replies carried, per class; vLLM's histograms give acceptance by
position; an upstream whose replies carry no figures is said once, by name, and never shown as
measured. llama-server's side runs against the real binary in test_proxy_llama.py."""

from __future__ import annotations

import io
import random
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import httpx
import msgspec
import pytest
from rich.console import Console
from standins import Figures, TabbyStandin, VllmStandin, carried, from_counts, from_histogram, positions
from test_proxy import PATHS, _rendered, proxy, timed
from upstream import FakeUpstream

from specmon.events.log import read_log
from specmon.events.schema import ServerScraped
from events import tally_of
from specmon.proxy.command import end_of_proxy
from specmon.proxy.reader import ReplyReader
from specmon.proxy.routing import SPEC
from specmon.proxy.tables import log_summary, request_line, request_lines
from specmon.metrics import unreported
from specmon.metrics.unreported import Silence, notices
from specmon.tui import served_panes
from specmon.tui.served_state import ServedState
from events import request_timed
from waiting import wait_until

# a class's figures follow its prompt: a vLLM histogram (steps that accepted exactly j), or TabbyAPI's counts
HISTOGRAMS = {"alpha": [2, 1, 0, 5], "beta": [6, 3, 1, 0], "gamma": [1, 1, 2, 2, 4]}
COUNTS = {"alpha": (30, 6), "beta": (8, 20), "gamma": (17, 17)}
CLASSES = {"alpha": "code-edit", "beta": "chat", "gamma": "rewrite"}  # named by header: no rule decides
ASKS = [("chat", False), ("chat", True), ("completion", False), ("completion", True)]  # (endpoint, streamed)
# a stream asks for usage, as vLLM's usage chunk needs (its JSON reply always has usage); TabbyAPI sends
# usage only when asked, streamed or not
STREAMS, ALWAYS, NEVER = "streams", "always", "never"


def word(body: dict) -> str:
    text = body.get("prompt") or body["messages"][-1]["content"]
    return text.split()[0]


def vllm_figures(body: dict) -> Figures:
    return from_histogram(HISTOGRAMS[word(body)], decode_ms=40.0 + len(word(body)))


def tabby_figures(body: dict) -> Figures:
    return from_counts(*COUNTS[word(body)], decode_ms=120.0)


def ask(url: str, endpoint: str, stream: bool, prompt: str, usage: str = STREAMS) -> bytes:
    """One request named into its class; the bytes the client received."""
    body = {"max_tokens": 32, "stream": stream}
    body.update({"messages": [{"role": "user", "content": prompt}]} if endpoint == "chat" else {"prompt": prompt})
    if usage == ALWAYS or (usage == STREAMS and stream):
        body["stream_options"] = {"include_usage": True}
    headers = {"X-Specmon-Class": CLASSES[prompt.split()[0]]}
    with httpx.Client(timeout=60, trust_env=False) as client:
        with client.stream("POST", url + PATHS[endpoint], json=body, headers=headers) as reply:
            assert reply.status_code == 200
            return b"".join(reply.iter_raw())


def drive(url: str, usage: str = STREAMS, rounds: int = 2, seed: int = 3) -> dict[str, list[dict]]:
    """Every class asked on every (endpoint, streamed), in a shuffled order: class -> what each reply carried."""
    asks = [(prompt, endpoint, stream) for prompt in CLASSES for endpoint, stream in ASKS] * rounds
    random.Random(seed).shuffle(asks)
    received: dict[str, list[dict]] = {}
    for prompt, endpoint, stream in asks:
        raw = ask(url, endpoint, stream, f"{prompt} please", usage)
        received.setdefault(CLASSES[prompt], []).append(carried(raw))
    return received


def log_info(log: Path) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "specmon.cli", "log", "info", str(log)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def assert_sums(log: Path, received: dict[str, list[dict]], family: str) -> None:
    """The log's events, its per-class sums, and `log info`'s rows hold what the replies carried."""
    events = timed(log)
    assert {ev.family for ev in events} == {family} and all(ev.status == 200 for ev in events)
    totals = tally_of(events).totals
    rows = {tuple(line.split()[:5]) for line in log_info(log)}
    for name, replies in received.items():
        t = totals[(name, SPEC)]
        drafted, accepted = sum(r["drafted"] for r in replies), sum(r["accepted"] for r in replies)
        assert t.requests == t.reported == len(replies)
        assert (t.draft_n, t.draft_n_accepted) == (drafted, accepted)
        assert t.predicted_n == sum(r["generated"] for r in replies)
        assert (name, SPEC, str(len(replies)), str(drafted), str(accepted)) in rows, name


@pytest.mark.parametrize("endpoint", ["chat", "completion"])
@pytest.mark.parametrize("stream", [False, True])
def test_each_vllm_reply_is_logged_with_the_figures_it_carried(tmp_path, endpoint, stream):
    with VllmStandin(vllm_figures) as vllm, proxy(tmp_path / "p.specmon", vllm.url) as p:
        raw = ask(p.url, endpoint, stream, "gamma please")
    (ev,) = timed(tmp_path / "p.specmon")
    sent = carried(raw)
    assert (ev.family, ev.stream, ev.prompt_class) == ("vllm", stream, "rewrite")
    assert (ev.draft_n, ev.draft_n_accepted, ev.spec_steps) == (sent["drafted"], sent["accepted"], sent["steps"])
    assert ev.accepted_per_pos == positions(tuple(sent["histogram"])) == [9, 8, 6, 4]
    assert (ev.predicted_n, ev.predicted_ms) == (sent["generated"], 45.0)  # vLLM's generation_time_ms


def test_vllm_per_class_sums_in_the_log_and_log_info_are_the_replies(tmp_path):
    log = tmp_path / "p.specmon"
    with VllmStandin(vllm_figures) as vllm, proxy(log, vllm.url) as p:
        received = drive(p.url)
    assert_sums(log, received, "vllm")
    totals = tally_of(timed(log)).totals
    for name, replies in received.items():
        t = totals[(name, SPEC)]
        steps = sum(r["steps"] for r in replies)
        histogram = [sum(col) for col in zip(*(r["histogram"] for r in replies))]
        assert t.spec_steps == t.pos_steps == steps and t.counted_steps
        assert list(t.accepted_per_pos) == positions(tuple(histogram))
        assert t.position_rates() == pytest.approx([n / steps for n in positions(tuple(histogram))])
        assert t.tokens_per_step == pytest.approx(1 + t.draft_n_accepted / steps)  # vLLM's mean acceptance length
    shown = log_info(log)
    [chat] = [line for line in shown if line.strip().startswith("chat spec:")]  # acceptance by position
    assert chat.split()[2:5] == [f"{n / 10:.2f}" for n in positions((6, 3, 1, 0))]


def test_tabbyapi_per_class_sums_in_the_log_and_log_info_are_the_replies(tmp_path):
    log = tmp_path / "p.specmon"
    with TabbyStandin(tabby_figures) as tabby, proxy(log, tabby.url) as p:
        received = drive(p.url, ALWAYS)
    assert_sums(log, received, "tabbyapi")
    for ev in timed(log):  # TabbyAPI counts no steps and gives no histogram; its decode time is completion_time
        assert (ev.spec_steps, ev.accepted_per_pos, ev.predicted_ms) == (None, [], 120.0)
    code = tally_of(timed(log)).totals[("code-edit", SPEC)]
    assert code.tokens_per_step == pytest.approx(code.predicted_n / (code.predicted_n - code.draft_n_accepted))


@pytest.mark.parametrize(
    "standin, usage, family, how, short",
    [
        (
            lambda: VllmStandin(vllm_figures, spec_metrics=False),
            STREAMS,
            "vLLM",
            "--per-request-spec-decode-metrics",
            "needs --per-request-spec-decode-metrics",
        ),
        (
            lambda: TabbyStandin(tabby_figures, draft=False),
            ALWAYS,
            "TabbyAPI",
            "load a draft model",
            "load a draft model",
        ),
        # no speculation: nothing drafted, and no /metrics read says the server drafts
        (
            lambda: FakeUpstream("-plain"),
            STREAMS,
            "llama-server",
            "start it with a draft model",
            "has reported no draft yet",
        ),
    ],
)
def test_an_upstream_whose_replies_carry_no_figures_is_said_once_and_never_measured(
    tmp_path, standin, usage, family, how, short
):
    log, lines = tmp_path / "p.specmon", []
    with standin() as upstream, proxy(log, upstream.url) as p:
        p.options.line = lines.append  # the headless proxy's printer
        for endpoint, stream in ASKS * 2:
            ask(p.url, endpoint, stream, "beta please", usage)
    told = [" ".join(line.split()) for line in lines if how in " ".join(line.split())]  # a notice is wrapped
    assert len(told) == 1 and f" ({SPEC}, {family}) reports no draft counts" in told[0]
    assert len(lines) == len(ASKS) * 2 + 1  # a record per request, and the notice on lines of its own
    events = timed(log)
    assert all(ev.draft_n is None and ev.draft_n_accepted is None for ev in events)
    t = tally_of(events).totals[("chat", SPEC)]
    assert (t.requests, t.reported, t.acceptance, t.tokens_per_step) == (8, 0, None, None)
    [row] = [line for line in log_info(log) if line.split()[:2] == ["chat", SPEC]]
    assert row.split()[2:6] == ["8", "-", "-", "not"] and "not reported" in row  # no 0 drafted, no 0% accepted
    assert " ".join(" ".join(log_info(log)).split()).count(how) == 1  # log info says it once too (wrapped)
    state = ServedState()
    state.apply(list(read_log(log)))
    pane = served_panes.render_classes(state, 120).plain
    assert " n/r " in pane and pane.count(short) == 1  # the view's short form of the notice


@contextmanager
def ngram_llama_proxied(log: Path, lines: list[str]):
    """A proxy, its headless lines into `lines`, before a llama-server whose /metrics count 9 drafts and whose
    reply carries no draft_n (an n-gram --spec-type that found no match); one request answered. Yields both."""
    with FakeUpstream("-plain") as upstream:
        upstream.metrics_page = "llama-server-after.txt"  # 9 drafts counted
        with proxy(log, upstream.url, scrape_s=0.05) as p:
            p.options.line = lines.append
            wait_until(lambda: p.reads.last_counted is not None, "the proxy's first read of the upstream's /metrics")
            ask(p.url, "chat", False, "beta please")
            yield upstream, p


def test_an_ngram_llama_server_whose_requests_drafted_nothing_is_not_told_to_start_drafting(tmp_path):
    """llama-server leaves draft_n out of a reply that drafted nothing (an n-gram --spec-type finds no match):
    where its /metrics, read by the proxy, count drafts, the headless line and log info say so."""
    log, lines = tmp_path / "p.specmon", []
    with ngram_llama_proxied(log, lines) as (upstream, _):
        pass
    said = f"upstream {upstream.url} (spec, llama-server) drafts (9 drafts on its /metrics) but no request through"
    assert [" ".join(line.split()) for line in lines if "drafts (" in line][0].startswith(said)
    shown = " ".join(" ".join(log_info(log)).split())
    assert said in shown and "start it with" not in shown


def test_the_end_of_a_proxy_reads_its_last_counted_read_and_gives_the_log_on_a_line_of_its_own(tmp_path, monkeypatch):
    """The upstream's last read failed (it stopped first): the table's notice still goes by the read before,
    which counted 9 drafts, not tell it to start drafting; the log's path is a line of its own, whole (in
    the table's title it wrapped at column 0 between `(log:` and the path)."""
    monkeypatch.chdir(tmp_path)
    log, lines = Path("proxy-" + "a-long-name-" * 5 + ".specmon"), []  # too long to follow the title in 80
    with ngram_llama_proxied(log, lines) as (upstream, p):
        upstream.metrics_page = "absent.txt"  # its /metrics fail from now on
        asked = upstream.metrics_asked
        # the proxy reads again only once it has taken in the read before: two more, and a failed one is in
        wait_until(lambda: upstream.metrics_asked >= asked + 2, "a failed read of the upstream's /metrics")
        console = Console(file=io.StringIO(), width=80, color_system=None)
        console.print(end_of_proxy(p, log))
    shown = console.file.getvalue().splitlines()
    assert shown[0].split() == ["requests", "per", "class"]
    words = " ".join(" ".join(shown).split())
    assert "drafts (9 drafts on its /metrics)" in words and "start it with" not in words
    assert [line for line in shown if str(log) in line] == [f"log: {log}"]


def test_a_vllm_stream_whose_client_asks_no_usage_is_measured_and_the_client_gets_no_usage_chunk(tmp_path):
    """The proxy asks vLLM for the usage chunk its `metrics` ride on, reads it, and drops it for the client."""
    log = tmp_path / "p.specmon"
    with VllmStandin(vllm_figures) as vllm, proxy(log, vllm.url) as p:
        raw = ask(p.url, "chat", True, "alpha please", NEVER)
    (ev,) = timed(log)
    f = vllm_figures({"messages": [{"content": "alpha please"}]})
    assert (ev.family, ev.draft_n, ev.draft_n_accepted, ev.predicted_n) == ("vllm", f.drafted, f.accepted, f.generated)
    assert vllm.sent[0][1]["stream_options"] == {"include_usage": True}  # asked upstream
    assert b'"usage"' not in raw and raw.endswith(b"data: [DONE]\n\n")  # not handed to the client
    assert notices([ev]) == []


def test_without_a_decode_time_the_proxys_clock_is_shown_as_such(tmp_path):
    """vLLM without --enable-per-request-metrics: the server's decode time stays None; a stream's first
    to last byte gives tok/s marked as the proxy's clock."""
    slow = lambda body: from_histogram([1, 1, 2], decode_ms=None, delay_s=0.3)  # noqa: E731
    log = tmp_path / "p.specmon"
    with VllmStandin(slow, timing_metrics=False) as vllm, proxy(log, vllm.url) as p:
        raw = ask(p.url, "chat", True, "beta please")
    (ev,) = timed(log)
    assert (ev.predicted_n, ev.predicted_ms) == (carried(raw)["generated"], None)
    assert ev.total_ms - ev.first_byte_ms >= 250  # the stand-in's delay, spread over its chunks
    t = tally_of([ev]).totals[("chat", SPEC)]
    assert t.tok_per_s is None and t.clocked_tok_per_s == pytest.approx((ev.predicted_n - 1) / (t.clocked_ms / 1e3))
    shown = _rendered(log_summary(read_log(log)))
    assert f"{t.clocked_tok_per_s:.1f}*" in shown and "the proxy's clock" in shown
    assert f" tok/s={t.clocked_tok_per_s:.1f}* " in request_line(ev)


@pytest.mark.parametrize("family", ["vllm", "tabbyapi"])
def test_the_reader_finds_the_figures_wherever_the_reply_is_cut(family):
    standin = VllmStandin(vllm_figures) if family == "vllm" else TabbyStandin(tabby_figures)
    rng = random.Random(11)
    for endpoint in ("chat", "completion"):
        body = {"stream": True, "stream_options": {"include_usage": True}, "prompt": "gamma"}
        f = standin.figures(body)
        stream = b"".join(standin._event(c) for c in standin.chunks(endpoint, body, f)) + standin._event("[DONE]")
        whole = _read(stream, "text/event-stream", [len(stream)])
        assert (whole.family, whole.draft_n, whole.draft_n_accepted) == (family, f.drafted, f.accepted)
        assert whole.predicted_n == f.generated
        for _ in range(10):
            assert _read(stream, "text/event-stream", [rng.randint(1, 200) for _ in range(40)]) == whole
        json_reply = standin._event(standin.reply(endpoint, body, f))[6:]
        assert _read(json_reply, "application/json", [7] * 300) == whole


def _read(content: bytes, content_type: str, sizes: list[int]):
    reader, at = ReplyReader(content_type), 0
    for size in sizes:
        reader.feed(content[at : at + size])
        at += size
    reader.feed(content[at:])
    reader.close()
    return reader.evidence


def test_a_session_is_told_once_per_upstream_and_each_session_apart(tmp_path):
    """The headless line's fold is its proxy's (Proxying.told), not the process's: two proxies in one
    process before one silent upstream each tell it once, however many of its replies they relay."""
    told = Silence()
    said = [told.observe(request_timed(upstream=side, family="vllm")) for side in (SPEC, SPEC, "plain")]
    assert [s is not None for s in said] == [True, False, False]  # the plain side is never told
    assert told.observe(request_timed(draft_n=4, family="vllm")) is None  # it did report once
    lines: dict[str, list[str]] = {"a": [], "b": []}
    with FakeUpstream("-plain") as upstream, proxy(tmp_path / "a.specmon", upstream.url) as a:
        with proxy(tmp_path / "b.specmon", upstream.url) as b:
            a.options.line, b.options.line = lines["a"].append, lines["b"].append
            for p in (a, a, b, a, b):
                ask(p.url, "chat", False, "beta please")
    records = {name: sum(line.startswith("200 ") for line in printed) for name, printed in lines.items()}
    assert records == {"a": 3, "b": 2}
    assert {name: len(lines[name]) - n for name, n in records.items()} == {"a": 1, "b": 1}  # a notice each


def test_the_headless_record_fits_80_columns_and_its_notice_follows_on_lines_of_its_own():
    """The trial's `proxy --headless` line, with the notice appended after `; `, was 362 columns: the record
    stays one line a script can split (status, short id, class, then key=value) and the notice is wrapped."""
    told = Silence()
    told.read(ServerScraped(session_id="p", t=0.0, url="http://127.0.0.1:8080", kind="llama-server", drafts=6))
    ev = request_timed(
        session_id="p",
        request_id="c676e3f686df4b32",
        prompt_class="chat",
        predicted_n=32,
        predicted_ms=32 / 47.9 * 1e3,
        first_byte_ms=793.0,
        total_ms=794.0,
        family="llama-server",
        upstream_url="http://127.0.0.1:8080",
    )
    record, *notice = request_lines(ev, told, width=80)
    assert record == "200 c676e3f6 chat acc=n/r tokens=32 tok/s=47.9 total=794ms"
    printed = f"specmon: {notice[0]}".splitlines()
    assert all(len(line) <= 80 for line in [f"specmon: {record}", *printed]), printed
    assert len(printed) > 1 and all(line.startswith("  ") for line in printed[1:]), printed  # hung under itself
    assert " ".join(notice[0].split()) == unreported.said(ev, drafts=6)[0]  # the notice's words, every one
    streamed = msgspec.structs.replace(ev, stream=True, draft_n=48, draft_n_accepted=2, first_byte_ms=90.0)
    assert request_lines(streamed, told, width=80, sides=True) == [
        "200 c676e3f6 chat upstream=spec acc=2/48 tokens=32 tok/s=47.9 ttfb=90ms total=794ms"
    ]
