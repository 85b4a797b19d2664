"""`specmon serve` end to end: a real uvicorn server on loopback (in a thread of this process, so a
test can hold the decoder at a known point), the official `openai` client and raw httpx, the tiny
model, and every answer checked against the session's log."""

import json
import time
from contextlib import contextmanager
from pathlib import Path

import openai
import pytest

from specmon.events.log import read_log
from specmon.events.schema import PromptFinished, PromptStarted, RoundVerified, SessionFinished
from specmon.policy.schema import load_policy
from specmon.server.runner import ServeOptions, Serving
from specmon.transport.session import live_session
from events import policy_loaded
from specmoncli import decoded, finished_prompts
from waiting import wait_until  # the shared wait; test_serve_* import it from here too

HELLO = [{"role": "user", "content": "Say hello to the world."}]


@contextmanager
def serving(tmp_path, tiny, policy="default", **options):
    """A live session serving on a free loopback port; yields (serving, log path)."""
    profile, pair = tiny
    log = tmp_path / f"serve-{time.monotonic_ns()}.specmon"
    loaded = load_policy(policy) if policy else None
    with live_session(pair, profile, log, serve=False, policy=loaded, announce=False, keep_events=False) as session:
        server = Serving(session, pair, profile, ServeOptions(port=0, **options), loaded)
        server.start()
        try:
            yield server, log
        finally:
            server.stop()


def client(server, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=kw.pop("api_key", "unused"), max_retries=0, **kw)


def events(log: Path, kind=None) -> list:
    return [e for e in read_log(log) if kind is None or isinstance(e, kind)]


def stream_text(chunks) -> tuple[str, list]:
    chunks = list(chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, chunks


def rounds_of(log: Path, prompt_id: str) -> list[RoundVerified]:
    return [e for e in events(log, RoundVerified) if e.prompt_id == prompt_id]


# -- the endpoints through the official client ------------------------------------------------


def test_chat_streamed_equals_whole_and_names_its_rounds(tmp_path, tiny):
    with serving(tmp_path, tiny) as (server, log):
        api = client(server)
        whole = api.chat.completions.create(model="tiny", messages=HELLO, max_tokens=24, temperature=0)
        text, chunks = stream_text(
            api.chat.completions.create(
                model="tiny",
                messages=HELLO,
                max_tokens=24,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    reply = whole.choices[0]
    assert reply.message.role == "assistant" and reply.finish_reason == "length"
    assert text == reply.message.content and len(text) > 0
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 24
    assert whole.usage.completion_tokens == 24
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + 24
    assert whole.model == "tiny.gguf"
    finished = {e.prompt_id: e for e in events(log, PromptFinished)}
    for response in (whole, chunks[-2]):
        info = response.specmon
        rounds = rounds_of(log, info["prompt_id"])
        assert info["prompt_id"] == response.id and info["session_id"] == events(log)[0].session_id
        assert info["round_ids"] == [r.round_id for r in rounds]
        assert info["draft_lens"] == [r.draft_len for r in rounds]
        assert info["prompt_class"] == "chat" and "classes[3].default" in info["class_rule"]
        assert sum(len(r.emitted) for r in rounds) == 24
        assert finished[response.id].stop_reason == "max_new_tokens"
    assert isinstance(events(log)[-1], SessionFinished)


def plain_decoding(tmp_path, prompt: str, max_new_tokens: int, *args) -> PromptFinished:
    """`specmon run -k 0 ARGS` of `prompt` alone, in a process of its own: the prompt its log says it decoded."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "p", "prompt": prompt, "max_new_tokens": max_new_tokens}) + "\n")
    return finished_prompts(decoded(tmp_path / "run.specmon", *args, "--prompts", prompts, "-k", 0))[0]


def test_greedy_reply_equals_specmon_runs_plain_decoding(tmp_path, tiny):
    profile, _ = tiny
    prompt = "Write a Python function that adds two numbers."
    with serving(tmp_path, tiny) as (server, log):
        reply = client(server).chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": prompt}], max_tokens=40, temperature=0
        )
    assert any(r.draft_len > 0 for r in rounds_of(log, reply.id)), "the policy should have speculated some rounds"
    plain = plain_decoding(tmp_path, prompt, 40, "--profile", profile.source)
    _, pair = tiny
    tokens = [t for t in plain.generated if t != pair.tokenizer.eos_id]
    assert reply.choices[0].message.content == pair.tokenizer.decode(tokens)


def test_completions_and_models(tmp_path, tiny):
    with serving(tmp_path, tiny) as (server, log):
        api = client(server)
        models = api.models.list()
        whole = api.completions.create(model="tiny", prompt="Once upon a time", max_tokens=12, temperature=0)
        pieces = list(
            api.completions.create(model="tiny", prompt="Once upon a time", max_tokens=12, temperature=0, stream=True)
        )
        by_ids = api.completions.create(model="tiny", prompt=[1, 80, 81, 82], max_tokens=3, temperature=0)
    assert [m.id for m in models.data] == ["tiny.gguf"]
    assert whole.object == "text_completion" and whole.choices[0].finish_reason == "length"
    assert whole.usage.completion_tokens == 12
    assert "".join(p.choices[0].text for p in pieces if p.choices) == whole.choices[0].text
    assert pieces[-1].choices[0].finish_reason == "length"
    assert by_ids.usage.prompt_tokens == 4 and by_ids.usage.completion_tokens == 3
    started = [e for e in events(log, PromptStarted)]
    assert [s.prompt_id for s in started] == [whole.id, pieces[0].id, by_ids.id]
    assert started[0].prompt_tokens == whole.usage.prompt_tokens


def test_stop_string_ends_the_reply_and_the_decode(tmp_path, tiny):
    with serving(tmp_path, tiny, policy=None, draft_len=2) as (server, log):
        api = client(server)
        full = api.chat.completions.create(model="t", messages=HELLO, max_tokens=32, temperature=0)
        text = full.choices[0].message.content
        stop = text[len(text) // 2 : len(text) // 2 + 2]
        cut = api.chat.completions.create(model="t", messages=HELLO, max_tokens=32, temperature=0, stop=[stop])
        streamed, chunks = stream_text(
            api.chat.completions.create(model="t", messages=HELLO, max_tokens=32, temperature=0, stop=stop, stream=True)
        )
    assert cut.choices[0].message.content == text[: text.find(stop)]
    assert cut.choices[0].finish_reason == "stop" and streamed == text[: text.find(stop)]
    assert chunks[-1].choices[0].finish_reason == "stop"
    finished = {e.prompt_id: e for e in events(log, PromptFinished)}
    assert finished[cut.id].stop_reason == "stop" and len(finished[cut.id].generated) < 32
    assert all(r.draft_len == 2 for r in events(log, RoundVerified))
    assert cut.specmon["prompt_class"] == "default"


def test_the_request_names_its_class(tmp_path, tiny):
    with serving(tmp_path, tiny) as (server, log):
        api = client(server)
        by_body = api.chat.completions.create(
            model="t", messages=HELLO, max_tokens=4, extra_body={"specmon_class": "code-edit"}
        )
        by_header = api.chat.completions.create(
            model="t", messages=HELLO, max_tokens=4, extra_headers={"X-Specmon-Class": "rewrite"}
        )
        with pytest.raises(openai.BadRequestError) as refused:
            api.chat.completions.create(model="t", messages=HELLO, max_tokens=4, extra_body={"specmon_class": "nope"})
    assert by_body.specmon["prompt_class"] == "code-edit" and "named by the request" in by_body.specmon["class_rule"]
    assert by_header.specmon["prompt_class"] == "rewrite"
    assert refused.value.body["param"] == "specmon_class" and refused.value.status_code == 400
    classes = [(e.prompt_id, e.prompt_class) for e in events(log, PromptStarted)]
    assert classes == [(by_body.id, "code-edit"), (by_header.id, "rewrite")]


@pytest.mark.slow
def test_the_embedded_model_served_streamed_and_whole_equal_plain_decoding(tmp_path, profile, pair):
    prompt = "Quelle est la capitale de la France et pourquoi est-elle célèbre ?"
    messages = [{"role": "user", "content": prompt}]
    with serving(tmp_path, (profile, pair)) as (server, log):
        api = client(server)
        whole = api.chat.completions.create(model="smollm2", messages=messages, max_tokens=32, temperature=0)
        text, chunks = stream_text(
            api.chat.completions.create(model="smollm2", messages=messages, max_tokens=32, temperature=0, stream=True)
        )
        models = api.models.list()
    assert [m.id for m in models.data] == ["smollm2-135m-instruct"]
    assert text == whole.choices[0].message.content and "France" in text
    assert whole.choices[0].finish_reason == "stop"  # the model ended its reply (eos) within 32 tokens
    assert whole.specmon["prompt_class"] == "non-english"
    plain = plain_decoding(tmp_path, prompt, 32)
    tokens = [t for t in plain.generated if t != pair.tokenizer.eos_id]
    assert whole.choices[0].message.content == pair.tokenizer.decode(tokens)
    assert whole.usage.completion_tokens == len(tokens)  # the tokens sent: the end token never is


def test_under_the_monitor_the_view_sees_the_rounds_and_quitting_stops_the_server(tmp_path, tiny, monkeypatch):
    """`specmon serve` in a terminal: the live monitor drains the session's view while requests are
    served; its quitting shuts the server down. The app here is a stand-in that makes a request."""
    from specmon.tui.beside import serve_under_tui
    from specmon.tui import factory

    profile, pair = tiny
    seen = {}

    class Monitor:
        def __init__(self, feed):
            self.feed = feed

        def run(self):
            wait_until(lambda: server.server.started, "the server is up")
            seen["reply"] = client(server).chat.completions.create(model="t", messages=HELLO, max_tokens=5)
            seen["events"] = self.feed.drain()
            seen["title"] = self.feed.title

    monkeypatch.setattr(factory, "make_app", Monitor)
    log = tmp_path / "tui.specmon"
    with live_session(
        pair, profile, log, serve=False, policy=None, announce=False, keep_events=False, viewer=True
    ) as session:
        server = Serving(session, pair, profile, ServeOptions(port=0, draft_len=2))
        serve_under_tui(session, server, "serve: tiny")
    rounds = [e for e in seen["events"] if isinstance(e, RoundVerified)]
    assert [r.round_id for r in rounds] == seen["reply"].specmon["round_ids"] and seen["title"] == "serve: tiny"
    assert server.worker.failure is None and not server.worker.thread.is_alive()
    assert isinstance(events(log)[-1], SessionFinished)


def test_a_named_tag_wins_over_the_text_rules_of_earlier_classes(tmp_path, tiny):
    """A request naming a class's match.tag gets that class even when the text matches an earlier class
    (here the prompt gives code, which is code-edit's rule): the request's word is final, as for a name."""
    policy = tmp_path / "tagged.toml"
    text = load_policy("default").text
    chat = text.index('name = "chat"')
    line_end = text.index("\n", chat) + 1
    policy.write_text(text[:line_end] + 'match.tag = "editor"\n' + text[line_end:])
    code = [
        {
            "role": "user",
            "content": "Tidy this up:\n```python\ndef average(values):\n    total = 0\n"
            "    for v in values:\n        total += v\n    return total / len(values)\n```",
        }
    ]
    with serving(tmp_path, tiny, policy=str(policy)) as (server, log):
        api = client(server)
        by_text = api.chat.completions.create(model="t", messages=code, max_tokens=2)
        by_header = api.chat.completions.create(
            model="t", messages=code, max_tokens=2, extra_headers={"X-Specmon-Class": "editor"}
        )
        by_body = api.chat.completions.create(
            model="t", messages=code, max_tokens=2, extra_body={"specmon_class": "editor"}
        )
    assert by_text.specmon["prompt_class"] == "code-edit"
    for reply in (by_header, by_body):
        assert reply.specmon["prompt_class"] == "chat", reply.specmon
        assert reply.specmon["class_rule"].startswith("classes[3].match.tag (line ")
    assert [e.prompt_class for e in events(log, PromptStarted)] == ["code-edit", "chat", "chat"]


def test_an_empty_class_name_names_nothing_and_a_long_one_is_not_echoed_whole(tmp_path, tiny):
    """An empty X-Specmon-Class header (as proxies pass an unset variable) or body field means no class
    was named, the same either way; a name that matches nothing is quoted short in the refusal."""
    with serving(tmp_path, tiny) as (server, log):
        api = client(server)
        by_header = api.chat.completions.create(
            model="t", messages=HELLO, max_tokens=2, extra_headers={"X-Specmon-Class": ""}
        )
        by_body = api.chat.completions.create(model="t", messages=HELLO, max_tokens=2, extra_body={"specmon_class": ""})
        with pytest.raises(openai.BadRequestError) as refused:
            api.chat.completions.create(
                model="t", messages=HELLO, max_tokens=2, extra_body={"specmon_class": "x" * 5000}
            )
    for reply in (by_header, by_body):
        assert reply.specmon["prompt_class"] == "chat" and "classes[3].default" in reply.specmon["class_rule"]
    assert refused.value.body["param"] == "specmon_class" and len(refused.value.body["message"]) < 300


def test_models_retrieve_and_the_sampling_values_other_servers_send(tmp_path, tiny):
    """`models.retrieve(id)` answers for the served model and 404s another; OpenAI's top_p 0 means
    the top token alone (greedy) and vLLM's top_k -1 means no cut: both are taken, not refused."""
    with serving(tmp_path, tiny, policy=None) as (server, log):
        api = client(server)
        served = api.models.list().data[0].id
        assert api.models.retrieve(served).id == served
        with pytest.raises(openai.NotFoundError) as missing:
            api.models.retrieve("gpt-4o")
        ask = dict(model=served, messages=[{"role": "user", "content": "Name three colours."}], max_tokens=6)
        greedy = api.chat.completions.create(**ask, temperature=0)
        nucleus_zero = api.chat.completions.create(**ask, temperature=0.8, top_p=0)
        no_cut = api.chat.completions.create(**ask, temperature=0, extra_body={"top_k": -1})
    assert missing.value.status_code == 404 and missing.value.body["code"] == "model_not_found"
    assert nucleus_zero.choices[0].message.content == greedy.choices[0].message.content
    assert no_cut.choices[0].message.content == greedy.choices[0].message.content
    started = {e.prompt_id: e.sampling for e in events(log, PromptStarted)}
    assert started[nucleus_zero.id].temperature == 0.0 and started[nucleus_zero.id].top_p == 1.0
    assert started[no_cut.id].top_k == 0


def test_a_refused_policy_edit_wraps_to_the_terminal_and_stays_whole_when_piped(monkeypatch, capsys):
    """The trial's refused-edit line ran to 164 columns on an 80-column terminal."""
    from specmon.policy.reload import print_reload

    error = "/tmp/srv2.toml:11:1: policy.min_gain = -1.5 is out of range: a number above -1 and below 10"
    refused = policy_loaded(source="/tmp/srv2.toml", sha256="", accepted=False, error=error)
    monkeypatch.setenv("COLUMNS", "80")
    print_reload(refused)
    wrapped = capsys.readouterr().err.splitlines()
    assert len(wrapped) > 1 and all(len(line) <= 80 for line in wrapped), wrapped
    assert all(line.startswith("  ") for line in wrapped[1:]), wrapped  # hung under the message
    said = f"specmon: policy edit refused, the previous policy stays in force: {error}"
    assert " ".join(wrapped).split() == said.split()
    monkeypatch.delenv("COLUMNS")  # pytest's stderr is no terminal: piped
    print_reload(refused)
    assert capsys.readouterr().err == f"specmon: policy edit refused, the previous policy stays in force: {error}\n"
