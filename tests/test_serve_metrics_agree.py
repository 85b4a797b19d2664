"""/metrics and `specmon log info` on one serve log agree on every figure both show, per class and per
k: a real `specmon serve` (a subprocess, the tiny model drafting for itself from its first layer)
under a policy whose classes run at several k (two classes at their own draft_len, a class a request
names with speculation off, and an edit of the policy mid-session that moves one class to another
k), real requests through the openai SDK, one scrape, then `specmon log info` on the log.

The session cuts rounds both ways (max_tokens inside a run of accepted draft tokens, a stop string
inside a round). Where the two sides count different things by design the test checks the exact
difference: /metrics counts what a client was sent, the log every token decoded, so a stop
string's cut is in the log's emitted tokens and not in /metrics' (specmon/server/metrics.py has
the table of what each figure is on each side)."""

import os
import re
import signal
from collections import Counter, defaultdict
from contextlib import contextmanager
from pathlib import Path

import httpx
import openai
import pytest

from specmon.events.log import LogDamaged, read_log
from specmon.events.schema import PromptFinished, RoundVerified
from specmon.metrics.stats import class_stats
from specmoncli import REPO, finished_prompts, specmon, started
from tables_text import printed_rows
from test_serve import wait_until
from test_serve_queue import samples
from tinymodel import write_tiny_gguf

POLICY = """[policy]
mode = "enforce"

[[classes]]
name = "rewrite"
match.min_given = 0.4
speculate = "on"
draft_len = 3

[[classes]]
name = "plain"
match.tag = "plain"
speculate = "off"

[[classes]]
name = "chat"
default = true
speculate = "on"
draft_len = 4
"""
GREEDY = ["Why is the sky blue?", "Say hello to the world.", "What is a mat?", "Tell me a story."]
REWRITE = "Rewrite this: the cat sat on the mat, the cat sat on the mat, and the dog sat on the log."


def per_class_k(exposed: dict, name: str) -> dict[tuple[str, int], float]:
    return {
        (dict(labels)["class"], int(dict(labels)["k"])): value
        for (sample, labels), value in exposed.items()
        if sample == name
    }


def total(exposed: dict, name: str) -> float:
    return sum(v for (sample, _), v in exposed.items() if sample == name)


def chat(api, text: str, **kw):
    return api.chat.completions.create(model="t", messages=[{"role": "user", "content": text}], **kw)


@contextmanager
def serve(profile: Path, policy: Path, log: Path):
    """`specmon serve --headless` on a free port; yields its base URL; SIGTERM at the end."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "SPECMON_POLICY_POLL_S": "0"}
    proc = started("serve", "--headless", "--profile", profile, "--policy", policy, "--port", 0, "--log", log, env=env)
    try:
        banner = ""
        while not banner.startswith("specmon: serving"):
            banner = proc.stderr.readline()
            assert banner, "serve ended before it served"
        yield re.search(r"(http://[\d.]+:\d+)/v1", banner).group(1)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


def logged_rounds(log: Path, reply) -> list[RoundVerified]:
    """A finished request's rounds, read from the log while the server still writes it."""

    def events() -> list:
        found = []
        try:
            found.extend(read_log(log))
        except LogDamaged:
            pass  # a frame still being written: the whole ones before it are kept
        return found

    wait_until(
        lambda: any(isinstance(e, PromptFinished) and e.prompt_id == reply.id for e in events()),
        f"{reply.id} in the log",
    )
    return [e for e in events() if isinstance(e, RoundVerified) and e.prompt_id == reply.id]


def max_tokens_inside_an_accepted_run(log: Path, greedy: dict) -> tuple[str, int]:
    """(prompt, max_tokens) that cut a round's accepted draft tokens: greedy replies repeat their
    rounds, so a reply one token into a round that accepted 2 or more sends fewer than it accepted."""
    for text, reply in greedy.items():
        before = 0
        for ev in logged_rounds(log, reply):
            if ev.accepted >= 2:
                return text, before + 1
            before += len(ev.emitted)
    raise AssertionError("no greedy round accepted 2 draft tokens: pick other prompts")


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """One served session: (the /metrics scrape, the log, the replies with their usage, log info's stdout)."""
    tmp = tmp_path_factory.mktemp("agree")
    model = write_tiny_gguf(tmp / "tiny.gguf")
    profile, policy, log = tmp / "tiny.toml", tmp / "policy.toml", tmp / "serve.specmon"
    profile.write_text(
        f'name = "tiny"\nmax_new_tokens = 32\nmax_seq_len = 4096\n[target]\npath = "{model}"\n'
        '[drafter]\nkind = "layerskip"\nlayers = 1\n'
    )  # it accepts some drafts, not all
    policy.write_text(POLICY)
    with serve(profile, policy, log) as url:
        api = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        greedy = {text: chat(api, text, max_tokens=24, temperature=0) for text in GREEDY}
        replies = [
            *greedy.values(),
            chat(api, "Tell me a story.", max_tokens=24, temperature=0.9, seed=3),
            chat(api, REWRITE, max_tokens=24, temperature=0, extra_body={"specmon_class": "rewrite"}),
            chat(api, GREEDY[0], max_tokens=24, extra_body={"specmon_class": "plain"}),
        ]
        text, limit = max_tokens_inside_an_accepted_run(log, greedy)
        replies.append(chat(api, text, max_tokens=limit, temperature=0))  # max_tokens cuts accepted tokens
        whole = replies[0].choices[0].message.content
        stop = next(whole[i : i + 2] for i in range(3, len(whole) - 2) if whole[i : i + 2].strip())
        replies.append(chat(api, GREEDY[0], max_tokens=24, temperature=0, stop=stop))  # a stop string cuts a round
        policy.write_text(POLICY.replace("draft_len = 4", "draft_len = 2"))  # the edit: chat from k = 4 to 2
        in_force = ("specmon_policy_draft_len", (("class", "chat"),))
        wait_until(lambda: samples(httpx.get(url + "/metrics").text).get(in_force) == 2, "the edit taken")
        replies += [
            chat(api, "What is a mat?", max_tokens=24, temperature=0),
            chat(api, "Tell me a story.", max_tokens=24, temperature=0.9, seed=4),
            chat(api, REWRITE, max_tokens=24, temperature=0.9, seed=5, extra_body={"specmon_class": "rewrite"}),
        ]
        exposed = samples(httpx.get(url + "/metrics").text)
    info = specmon("log", "info", log, env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}, timeout=120)
    assert info.returncode == 0, info.stderr
    return exposed, log, replies, info.stdout


def cut_tokens(log: Path, replies) -> Counter:
    """Per (class, k): tokens the rounds emitted that no client was sent (a stop string's cut), taken
    from each request's last rounds backwards."""
    rounds, finished = defaultdict(list), {e.prompt_id: e for e in finished_prompts(read_log(log))}
    for ev in read_log(log):
        if isinstance(ev, RoundVerified):
            rounds[ev.prompt_id].append(ev)
    cut: Counter = Counter()
    for reply in replies:
        unsent = len(finished[reply.id].generated) - reply.usage.completion_tokens
        for ev in reversed(rounds[reply.id]):
            take = min(unsent, len(ev.emitted))
            cut[(ev.prompt_class, ev.draft_len)] += take
            unsent -= take
    return cut


def test_the_session_ran_classes_at_several_k_and_cut_replies(session):
    exposed, log, replies, _ = session
    runs = per_class_k(exposed, "specmon_rounds_total")
    assert {k for (cls, k) in runs if cls == "chat"} == {2, 4}, runs
    assert {("rewrite", 3), ("plain", 0)} <= set(runs), runs
    assert total(exposed, "specmon_spec_decode_num_verified_accepted_tokens_total") > 0
    assert total(exposed, "specmon_spec_decode_num_draft_tokens_total") > total(
        exposed, "specmon_spec_decode_num_verified_accepted_tokens_total"
    ), "some drafts rejected"
    assert sum(cut_tokens(log, replies).values()) > 0, "the stop string cut a round"
    cut, stopped = replies[7], replies[8]
    assert stopped.choices[0].finish_reason == "stop" and cut.choices[0].finish_reason == "length"
    assert total(exposed, "specmon_spec_decode_num_accepted_tokens_total") < total(
        exposed, "specmon_spec_decode_num_verified_accepted_tokens_total"
    ), "max_tokens cut accepted tokens"


def test_every_class_and_k_counts_the_same_rounds_on_metrics_and_in_log_info(session):
    """The functions behind log info (class_stats) against /metrics, at every k of every class."""
    exposed, log, replies, _ = session
    classes, cut = class_stats(read_log(log)), cut_tokens(log, replies)
    logged = {(name, k): run for name, c in classes.items() for k, run in c.runs.items() if run.rounds}
    metric = lambda name: per_class_k(exposed, name)  # noqa: E731
    assert set(logged) == set(metric("specmon_rounds_total"))
    assert {key: r.rounds for key, r in logged.items()} == metric("specmon_rounds_total")
    assert {key: r.proposed for key, r in logged.items() if r.proposed} == metric(
        "specmon_spec_decode_num_draft_tokens_total"
    )
    assert {key: r.accepted for key, r in logged.items() if r.proposed} == metric(
        "specmon_spec_decode_num_verified_accepted_tokens_total"
    )
    drafted = {key: r.rounds - r.empty_rounds for key, r in logged.items() if key[1]}  # log info: rounds - empty
    assert {key: n for key, n in drafted.items() if n} == metric("specmon_spec_decode_num_drafts_total")
    assert {key: r.emitted - cut[key] for key, r in logged.items()} == metric("specmon_emitted_tokens_total")
    goodput = metric("specmon_goodput_tokens_per_second")
    assert set(goodput) == set(logged)
    tokens, seconds = metric("specmon_decode_tokens_total"), metric("specmon_decode_seconds_total")
    for key, r in logged.items():
        assert goodput[key] == pytest.approx(r.tok_per_s, rel=1e-9), key
        assert tokens[key] / seconds[key] == pytest.approx(r.tok_per_s, rel=1e-9), key  # the dashboard's goodput


def test_requests_and_generated_tokens_agree_less_the_cut(session):
    exposed, log, replies, stdout = session
    finished = finished_prompts(read_log(log))
    requests = total(exposed, "specmon_requests_total")
    assert requests == len(finished) == len(replies)
    assert re.search(rf"PromptFinished\s+{len(finished)}\b", stdout), stdout
    assert total(exposed, "specmon_generation_tokens_total") == sum(r.usage.completion_tokens for r in replies)
    assert sum(len(f.generated) for f in finished) - total(exposed, "specmon_generation_tokens_total") == sum(
        cut_tokens(log, replies).values()
    )


def test_each_row_log_info_prints_equals_metrics_at_its_class_and_k(session):
    """What a user reads: every (class, k) row of log info's tables against /metrics there."""
    exposed, _, _, stdout = session
    rows = printed_rows(stdout)
    assert {("chat", "4"), ("rewrite", "3"), ("plain", "0")} <= set(rows), stdout
    rounds = per_class_k(exposed, "specmon_rounds_total")
    proposed = per_class_k(exposed, "specmon_spec_decode_num_draft_tokens_total")
    accepted = per_class_k(exposed, "specmon_spec_decode_num_verified_accepted_tokens_total")
    drafts = per_class_k(exposed, "specmon_spec_decode_num_drafts_total")
    goodput = per_class_k(exposed, "specmon_goodput_tokens_per_second")
    for (cls, k), row in rows.items():
        key = (cls, int(k))
        assert int(row["rounds"]) == rounds[key], (key, row)
        assert int(row["proposed"]) == proposed.get(key, 0), (key, row)
        assert int(row["accepted"]) == accepted.get(key, 0), (key, row)
        assert int(row["empty"]) == (rounds[key] - drafts.get(key, 0) if key[1] else 0), (key, row)
        assert float(row["tok/s"]) == pytest.approx(goodput[key], abs=0.051), (key, row)  # printed to 0.1


def test_log_info_shows_every_class_and_k_that_metrics_counts(session):
    exposed, _, _, stdout = session
    rows = printed_rows(stdout)
    rounds = per_class_k(exposed, "specmon_rounds_total")
    missing = {f"{cls} k={k}: {n:g} rounds" for (cls, k), n in rounds.items() if (cls, str(k)) not in rows}
    assert not missing, f"/metrics counts rounds log info does not show: {sorted(missing)}\n{stdout}"
