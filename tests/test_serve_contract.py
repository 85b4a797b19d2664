"""`specmon serve` keeps OpenAI's contract: every parameter of the chat and completions APIs (and
the extras clients send) is honoured with an effect a client sees, refused by name, or accepted
on purpose as metadata; usage and /metrics count only the tokens a client was sent. Driven by the
official `openai` client against a real server on the tiny model."""

import httpx
import openai
import pytest

from specmon.backends.loader import load_pair
from specmon.backends.profiles import load_profile
from specmon.events.schema import PromptFinished, RoundVerified
from test_serve import client, events, rounds_of, serving, stream_text
from test_serve_queue import samples
from tinymodel import write_tiny_gguf

ENDS_AT_50 = [{"role": "user", "content": "a"}]  # the tiny model's greedy reply ends (eos) at its 50th token
GREEDY = dict(model="t", temperature=0)


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    """The tiny model drafting for itself: under greedy every draft token is accepted, so a round
    of k = 8 holds more accepted tokens than a short max_tokens or a stop string lets through."""
    tmp = tmp_path_factory.mktemp("twin")
    model = write_tiny_gguf(tmp / "tiny.gguf")
    path = tmp / "twin.toml"
    path.write_text(
        f'name = "twin"\nmax_new_tokens = 32\nmax_seq_len = 4096\n[target]\npath = "{model}"\n'
        f'[drafter]\nkind = "model"\n[drafter.target]\npath = "{model}"\n'
    )
    profile = load_profile(str(path))
    return profile, load_pair(profile)


def finished(log, reply) -> PromptFinished:
    return next(e for e in events(log, PromptFinished) if e.prompt_id == reply.id)


# -- honoured, each with its effect --------------------------------------------------------------


def test_ignore_eos_min_tokens_and_stop_token_ids_change_where_the_reply_ends(tmp_path, tiny):
    with serving(tmp_path, tiny, policy=None, draft_len=2) as (server, log):
        api = client(server)
        plain = api.chat.completions.create(**GREEDY, messages=ENDS_AT_50, max_tokens=64)
        past_eos = api.chat.completions.create(
            **GREEDY, messages=ENDS_AT_50, max_tokens=64, extra_body={"ignore_eos": True}
        )
        at_least = api.chat.completions.create(
            **GREEDY, messages=ENDS_AT_50, max_tokens=64, extra_body={"min_tokens": 60}
        )
        first = finished(log, plain).generated[0]
        by_id = api.chat.completions.create(
            **GREEDY, messages=ENDS_AT_50, max_tokens=64, extra_body={"stop_token_ids": [first]}
        )
        streamed, chunks = stream_text(
            api.chat.completions.create(
                **GREEDY,
                messages=ENDS_AT_50,
                max_tokens=64,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"ignore_eos": True},
            )
        )
    text = plain.choices[0].message.content
    assert (plain.choices[0].finish_reason, plain.usage.completion_tokens) == ("stop", 49)  # its eos is not sent
    assert (past_eos.choices[0].finish_reason, past_eos.usage.completion_tokens) == ("length", 64)
    assert past_eos.choices[0].message.content.startswith(text) and len(past_eos.choices[0].message.content) > len(text)
    assert streamed == past_eos.choices[0].message.content and chunks[-1].usage.completion_tokens == 64
    assert at_least.usage.completion_tokens >= 60 and at_least.choices[0].message.content.startswith(text)
    eos = tiny[1].tokenizer.eos_id
    assert eos not in finished(log, at_least).generated[:60]  # masked, not skipped: no eos before the 60th
    assert (by_id.choices[0].finish_reason, by_id.usage.completion_tokens) == ("stop", 0)  # the end token alone
    assert by_id.choices[0].message.content == "" and finished(log, by_id).generated == [first]


def test_min_tokens_keeps_the_reply_open_past_a_stop_token_id(tmp_path, tiny):
    """Greedy with its first token made an end token and masked for 5 tokens: the target picks its
    runner-up instead, and the reply runs on."""
    with serving(tmp_path, tiny, policy=None, draft_len=2) as (server, log):
        api = client(server)
        plain = api.chat.completions.create(**GREEDY, messages=ENDS_AT_50, max_tokens=8)
        first = finished(log, plain).generated[0]
        masked = api.chat.completions.create(
            **GREEDY, messages=ENDS_AT_50, max_tokens=8, extra_body={"stop_token_ids": [first], "min_tokens": 5}
        )
    generated = finished(log, masked).generated
    assert generated[0] != first and first not in generated[:5] and len(generated) >= 5


def test_max_completion_tokens_limits_a_text_completion_and_wins_over_max_tokens(tmp_path, tiny):
    with serving(tmp_path, tiny, policy=None, draft_len=2) as (server, log):
        api = client(server)
        by_new_name = api.completions.create(
            model="t",
            prompt="Once upon a time",
            temperature=0,
            extra_body={"max_completion_tokens": 40, "ignore_eos": True},
        )
        both = api.chat.completions.create(**GREEDY, messages=ENDS_AT_50, max_tokens=30, max_completion_tokens=7)
    assert by_new_name.usage.completion_tokens == 40 and by_new_name.choices[0].finish_reason == "length"
    assert both.usage.completion_tokens == 7


def test_metadata_is_accepted_on_purpose_and_changes_nothing(tmp_path, tiny):
    with serving(tmp_path, tiny, policy=None, draft_len=2) as (server, log):
        api = client(server)
        plain = api.chat.completions.create(**GREEDY, messages=ENDS_AT_50, max_tokens=12)
        tagged = api.chat.completions.create(
            **GREEDY,
            messages=ENDS_AT_50,
            max_tokens=12,
            user="u-1",
            store=False,
            metadata={"team": "docs"},
            service_tier="auto",
            extra_body={"safety_identifier": "s-1", "prompt_cache_key": "k"},
        )
        text = api.completions.create(model="t", prompt="hi", max_tokens=3, user="u-2")
        with pytest.raises(openai.BadRequestError) as too_many:
            api.chat.completions.create(
                **GREEDY, messages=ENDS_AT_50, max_tokens=2, metadata={f"k{i}": "v" for i in range(17)}
            )
    assert tagged.choices[0].message.content == plain.choices[0].message.content
    assert text.usage.completion_tokens == 3
    assert too_many.value.body["param"] == "metadata"


# -- refused by name ------------------------------------------------------------------------------

CHAT_REFUSED = [
    ("min_p", 0.9),
    ("repetition_penalty", 2.0),
    ("reasoning_effort", "low"),
    ("verbosity", "low"),
    ("web_search_options", {}),
    ("logit_bias", {"5": 10}),
    ("n", 2),
    ("logprobs", True),
    ("top_logprobs", 2),
    ("presence_penalty", 0.5),
    ("frequency_penalty", 0.5),
    ("response_format", {"type": "json_object"}),
    ("tools", [{"type": "function", "function": {"name": "f"}}]),
    ("tool_choice", "auto"),
    ("functions", [{"name": "f"}]),
    ("function_call", "auto"),
    ("audio", {"voice": "x"}),
    ("modalities", ["text", "audio"]),
    ("prediction", {"type": "content", "content": "x"}),
    ("include_stop_str_in_output", True),
    ("no_such_parameter", 1),
]
COMPLETION_REFUSED = [
    ("echo", True),
    ("suffix", "x"),
    ("best_of", 2),
    ("logprobs", 1),
    ("min_p", 0.5),
    ("repetition_penalty", 1.3),
    ("reasoning_effort", "low"),
    ("messages", []),
]


def test_every_parameter_specmon_cannot_honour_is_refused_by_name(tmp_path, tiny):
    with serving(tmp_path, tiny, policy=None, draft_len=2) as (server, log):
        api = client(server)
        for name, value in CHAT_REFUSED:
            with pytest.raises(openai.BadRequestError) as refused:
                api.chat.completions.create(**GREEDY, messages=ENDS_AT_50, max_tokens=2, extra_body={name: value})
            assert refused.value.status_code == 400 and refused.value.body["param"] == name, (name, refused.value.body)
            assert refused.value.body["code"] == "unsupported_parameter", name
        for name, value in COMPLETION_REFUSED:
            with pytest.raises(openai.BadRequestError) as refused:
                api.completions.create(model="t", prompt="hi", max_tokens=2, extra_body={name: value})
            assert refused.value.body["param"] == name, (name, refused.value.body)
        neutral = api.chat.completions.create(
            **GREEDY, messages=ENDS_AT_50, max_tokens=2, extra_body={"min_p": 0, "repetition_penalty": 1.0}
        )
    assert neutral.usage.completion_tokens == 2
    assert [e.prompt_id for e in events(log, PromptFinished)] == [neutral.id]  # nothing refused was decoded


def _refusal(server, name, value) -> str:
    sent = httpx.post(server.url + "/v1/chat/completions", json={"messages": ENDS_AT_50, name: value})
    return sent.json()["error"]["message"]


def test_a_refusal_says_why_the_parameter_cannot_be_honoured(tmp_path, tiny):
    with serving(tmp_path, tiny, policy=None, draft_len=2) as (server, log):
        assert "temperature, top_p and top_k only" in _refusal(server, "min_p", 0.9)
        assert "draft tokens before it" in _refusal(server, "repetition_penalty", 2.0)
        assert "not a parameter specmon serve knows" in _refusal(server, "no_such_parameter", 1)
        sent = httpx.post(
            server.url + "/v1/chat/completions", json={"messages": ENDS_AT_50, "max_tokens": 4, "min_tokens": 9}
        )
    assert sent.status_code == 400 and sent.json()["error"]["param"] == "min_tokens"
    assert sent.json()["error"]["message"].startswith("min_tokens (9) is more than the reply may hold (4)")


# -- usage and counters count what was sent ----------------------------------------------------------


def needed(pair, generated: list[int], text: str) -> int:
    """The fewest leading tokens whose text holds `text`: what a reply cut there was sent."""
    decode = pair.tokenizer.decode
    return next(n for n in range(len(generated) + 1) if decode(generated[:n]).startswith(text))


def test_a_stop_string_or_max_tokens_cut_is_not_billed_nor_counted(tmp_path, twin):
    _, pair = twin
    with serving(tmp_path, twin, policy=None, draft_len=8) as (server, log):
        api = client(server)
        full = api.completions.create(model="t", prompt="hi", max_tokens=20, temperature=0)
        text = full.choices[0].text
        at = next(i for i in range(3, len(text)) if text[i].isascii() and text[i].isprintable())
        stop = text[at]
        cut = api.completions.create(model="t", prompt="hi", max_tokens=20, temperature=0, stop=stop)
        streamed, chunks = stream_text(
            api.chat.completions.create(
                **GREEDY,
                messages=ENDS_AT_50,
                max_tokens=20,
                stream=True,
                stream_options={"include_usage": True},
                stop=stop,
            )
        )
        short = api.completions.create(model="t", prompt="hi", max_tokens=3, temperature=0)
        exposed = samples(httpx.get(server.url + "/metrics").text)
    cut_text = text[: text.index(stop)]
    assert cut.choices[0].text == cut_text and cut.choices[0].finish_reason == "stop"
    assert cut.usage.completion_tokens == needed(pair, finished(log, cut).generated, cut_text)
    assert cut.usage.completion_tokens < len(finished(log, cut).generated)  # the round ran past the stop
    chat_id = chunks[0].id
    chat_generated = next(e for e in events(log, PromptFinished) if e.prompt_id == chat_id).generated
    assert chunks[-1].usage.completion_tokens == needed(pair, chat_generated, streamed)
    assert [(len(r.proposed), r.accepted, len(r.emitted)) for r in rounds_of(log, short.id)] == [(8, 8, 3)]
    assert short.usage.completion_tokens == 3
    billed = {
        full.id: full.usage.completion_tokens,
        cut.id: cut.usage.completion_tokens,
        chat_id: chunks[-1].usage.completion_tokens,
        short.id: 3,
    }
    total = lambda name: sum(v for k, v in exposed.items() if k[0] == name)  # noqa: E731
    assert total("specmon_generation_tokens_total") == sum(billed.values())
    assert total("specmon_emitted_tokens_total") == sum(billed.values())
    rounds = events(log, RoundVerified)
    assert total("specmon_spec_decode_num_verified_accepted_tokens_total") == sum(r.accepted for r in rounds)
    assert total("specmon_spec_decode_num_accepted_tokens_total") == sum(
        sent_accepted(rounds_of(log, request_id), sent) for request_id, sent in billed.items()
    )
    assert sum(billed.values()) < sum(len(r.emitted) for r in rounds)  # the test did cut tokens


def sent_accepted(rounds: list[RoundVerified], sent: int) -> int:
    """Accepted draft tokens among the first `sent` tokens of a request's rounds."""
    count = 0
    for r in rounds:
        kept = min(len(r.emitted), sent)
        count, sent = count + min(r.accepted, kept), sent - kept
    return count


def test_promtool_finds_nothing_to_lint_in_a_real_scrape(tmp_path, twin):
    """`promtool check metrics` (Debian's prometheus package, installed by .ci/run) on /metrics after
    requests of every kind: names in base units, counters ending in _total, help on every family."""
    import shutil
    import subprocess

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (apt-get install prometheus; .ci/run does)")
    with serving(tmp_path, twin, policy="default") as (server, log):
        api = client(server)
        api.chat.completions.create(**GREEDY, messages=ENDS_AT_50, max_tokens=6)
        api.completions.create(model="t", prompt="hi", max_tokens=3, stop="x")
        with pytest.raises(openai.BadRequestError):
            api.chat.completions.create(**GREEDY, messages=ENDS_AT_50, extra_body={"min_p": 0.5})
        scrape = httpx.get(server.url + "/metrics").text
    assert "specmon_goodput_tokens_per_second" in scrape and "_per_ms" not in scrape
    checked = subprocess.run([promtool, "check", "metrics"], input=scrape, capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0 and checked.stdout + checked.stderr == "", checked.stdout + checked.stderr


def test_starlettes_own_refusals_come_in_the_one_error_shape(tmp_path, tiny):
    with serving(tmp_path, tiny, policy=None, draft_len=2) as (server, _):
        missing = httpx.get(server.url + "/v1/nowhere")
        wrong = httpx.delete(server.url + "/v1/chat/completions")
    assert missing.status_code == 404 and wrong.status_code == 405
    assert missing.json()["error"]["code"] == "not_found"
    assert wrong.json()["error"]["code"] == "method_not_allowed"
    assert missing.json()["error"]["message"].startswith("GET /v1/nowhere: ")
