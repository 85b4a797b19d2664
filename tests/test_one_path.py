"""One decode path: the same prompts through `specmon run --policy P` (the CLI, a subprocess) and
through `specmon serve --policy P` (real HTTP on loopback, greedy) make the same rounds, prompt by
prompt (k, proposed, accepted, matched), and the same decisions; with two classes whose drafter
settings differ (one always on with the plain lookup, one whose drafts the policy cuts by their
match), interleaved, so a class's drafter settings cannot leak into the other's rounds.

Decisions come from the rounds' counts and the round costs; the profile pins those costs (timed
at load otherwise: two loads on a busy host time them apart) and pad_from, so both sides decide
and draft alike whatever the host's speed."""

import json
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from specmon.backends.profiles import load_profile
from specmon.engine.prompts import load_prompts
from specmon.events.log import read_log
from specmon.events.schema import Decision, PolicyLoaded, PromptStarted, RoundVerified
from specmon.policy.schema import load_policy
from specmon.sched.bench import shipped_prompts
from specmon.server.runner import ServeOptions, Serving
from specmon.transport.session import live_session
from specmoncli import decoded

REPO = Path(__file__).resolve().parent.parent
MAX_NEW = 32
COSTS = [1.0, 1.78, 2.13, 2.52, 3.15, 3.64, 3.98, 4.24, 5.28]  # llama.cpp's curve: short matches' drafts are cut

POLICY = """\
[policy]
mode = "enforce"
min_gain = 0.02

[[classes]]
name = "given"            # a passage or code is given: always on at k=8, the plain lookup (many drafting rounds)
match = { content = ["passage", "code"] }
speculate = "on"
draft_len = 8

[[classes]]
name = "chat"             # the rest: each draft cut by its match, on llama.cpp-like costs
default = true
draft_len = 6
"""


def _prompts(tmp_path: Path) -> Path:
    """rewrite and chat prompts of the shipped set, interleaved, with no class: the policy classifies them."""
    shipped = {p.id: p for p in load_prompts(shipped_prompts("bench"))}
    order = [
        i
        for pair in zip(
            ("rewrite-01", "rewrite-02", "rewrite-03", "code-edit-01"), ("chat-01", "chat-02", "qa-01", "chat-03")
        )
        for i in pair
    ]
    path = tmp_path / "interleaved.jsonl"
    path.write_text("".join(json.dumps({"id": i, "prompt": shipped[i].text}) + "\n" for i in order))
    return path


@pytest.fixture(scope="module")
def pinned(tmp_path_factory):
    """(profile path, profile, pair): the embedded default with pad_from pinned at 2 and its costs pinned."""
    from specmon.backends.loader import load_pair

    path = tmp_path_factory.mktemp("pinned") / "smollm2-pinned.toml"
    text = (REPO / "profiles" / "smollm2-cpu.toml").read_text()
    path.write_text(
        text.replace("\npad_from = 0 ", "\npad_from = 2 ")
        .replace('name = "smollm2-cpu"', 'name = "pinned"')
        .replace("\n[target]", f"\nverify_costs = {COSTS}\n\n[target]", 1)
    )
    profile = load_profile(str(path))
    assert profile.pad_from == 2 and profile.verify_costs == COSTS
    return path, profile, load_pair(profile)


@contextmanager
def serving(profile, pair, policy: Path, log: Path):
    """`specmon serve --policy POLICY` on a free loopback port; yields an HTTP client of it."""
    loaded = load_policy(str(policy))
    with live_session(pair, profile, log, serve=False, policy=loaded, announce=False, keep_events=False) as session:
        server = Serving(session, pair, profile, ServeOptions(port=0), loaded)
        server.start()
        try:
            with httpx.Client(base_url=server.url, timeout=300) as http:
                yield http
        finally:
            server.stop()


def ask(http: httpx.Client, text: str) -> None:
    """One greedy chat request, answered before the next is sent."""
    reply = http.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": text}], "temperature": 0, "max_tokens": MAX_NEW},
    )
    assert reply.status_code == 200, reply.text


def _serve(tmp_path: Path, profile, pair, policy: Path, prompts: Path) -> list:
    log = tmp_path / "serve.specmon"
    with serving(profile, pair, policy, log) as http:
        for prompt in load_prompts(prompts):  # one after another, as `run` decodes them
            ask(http, prompt.text)
    return list(read_log(log))


def _by_prompt(events: list) -> list[tuple]:
    """Per prompt in order: its class, the rule that gave it, and each round's (k, proposed, accepted, matched)."""
    prompts: list[tuple] = []
    for ev in events:
        if isinstance(ev, PromptStarted):
            prompts.append((ev.prompt_class, ev.class_rule, []))
        elif isinstance(ev, RoundVerified):
            prompts[-1][2].append((ev.draft_len, len(ev.proposed), ev.accepted, ev.matched))
    return prompts


def _decisions(events: list) -> list[tuple]:
    return [
        (d.prompt_class, d.rule_key, d.speculate_from, d.speculate_to, d.k_from, d.k_to, d.round_ids)
        for d in events
        if isinstance(d, Decision)
    ]


@pytest.mark.slow
def test_run_and_serve_decode_the_same_prompts_into_the_same_rounds_and_decisions(tmp_path, pinned):
    path, profile, pair = pinned
    policy, prompts = tmp_path / "p.toml", _prompts(tmp_path)
    policy.write_text(POLICY)
    flags = ["--profile", path, "--policy", policy, "--prompts", prompts, "--max-new-tokens", MAX_NEW]
    ran = decoded(tmp_path / "run.specmon", *flags)
    served = _serve(tmp_path, profile, pair, policy, prompts)
    assert [e.classes for e in ran if isinstance(e, PolicyLoaded)] == [
        e.classes for e in served if isinstance(e, PolicyLoaded)
    ]
    by_run, by_serve = _by_prompt(ran), _by_prompt(served)
    assert [c for c, _, _ in by_run] == ["given", "chat"] * 4  # interleaved, as the policy classified them
    for index, (a, b) in enumerate(zip(by_run, by_serve, strict=True)):
        assert a == b, f"prompt {index}: run {a[:2]} vs serve {b[:2]}"
    rounds = [r for _, _, rs in by_run for r in rs]
    given = [r for (c, _, rs) in by_run if c == "given" for r in rs if r[1]]
    chat = [r for (c, _, rs) in by_run if c == "chat" for r in rs if r[1]]
    assert given and chat and all(m == 0 for *_, m in given) and all(m >= 2 for *_, m in chat)
    assert sum(a for _, _, a, _ in rounds) > 0
    decided = _decisions(ran)
    assert decided == _decisions(served)
    print(
        f"\nrun vs serve: {len(by_run)} prompts, {len(rounds)} rounds equal (k, proposed, accepted, matched), "
        f"{len(given) + len(chat)} of them drafting ({sum(a for _, _, a, _ in rounds)} tokens accepted), "
        f"{len(decided)} decision(s) equal"
    )
    assert {c for c, *_ in decided} <= {"chat"}  # only the auto class decides
    assert max(n for _, n, _, _ in chat) < 6  # its drafts cut alike on both sides (k=6 would verify whole ones)
