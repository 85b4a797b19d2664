"""Every policy edit takes effect: draft_len, speculate, ngram and a class's match, edited while a
run and a server decode, are each in force from that class's next prompt, in the log and in the
TUI's classes pane; a request naming a class an edit removed is refused; a refused edit's whole
reason is on an 80x24 screen (a real terminal, tmux)."""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from specmon.engine.prompts import load_prompts
from specmon.errors import SpecmonError
from specmon.events.frames import LogDamaged
from specmon.events.log import read_log
from specmon.events.schema import PolicyLoaded, PromptStarted, RoundVerified, SessionFinished
from specmon.policy.engine import PolicyEngine
from specmon.policy.schema import load_policy
from specmon.sched.bench import shipped_prompts
from specmon.sched.policy import PolicyScheduler
from specmon.transport.session import live_session
from specmon.tui.state import ViewState
from events import policy_loaded
from test_one_path import MAX_NEW, ask, serving
from waiting import wait_for_screen, wait_until

REPO = Path(__file__).resolve().parent.parent
POLICY = """\
[policy]
mode = "enforce"

[[classes]]
name = "given"            # a passage or code is given
match = { content = ["passage", "code"] }
speculate = "auto"
draft_len = 8

[[classes]]
name = "chat"
default = true
speculate = "auto"
draft_len = 6
"""
# (after this many prompts, old text, new text): each edit's effect is checked on the next prompt of its class
EDITS = [
    (2, "draft_len = 6", "draft_len = 3"),
    (4, 'speculate = "auto"\ndraft_len = 8', 'speculate = "off"\ndraft_len = 8'),
    (6, 'default = true\nspeculate = "auto"', 'default = true\nspeculate = "on"'),
    (8, 'match = { content = ["passage", "code"] }', 'match = { tag = "given" }'),
]


def _prompts() -> list:
    """given and chat prompts of the shipped set, in turn, with no class: the policy classifies them."""
    shipped = {p.id: p for p in load_prompts(shipped_prompts("bench"))}
    given = ["rewrite-01", "code-edit-01", "rewrite-02", "summarize-01", "rewrite-03"]
    chat = ["chat-01", "chat-02", "qa-01", "chat-03", "qa-02"]
    return [shipped[i] for pair in zip(given, chat) for i in pair]


def _edit(path: Path, done: int) -> None:
    """The edit due after `done` prompts, written atomically with a new stamp (any file system's clock)."""
    for after, old, new in EDITS:
        if after == done:
            text = path.read_text()
            assert old in text
            scratch = path.with_suffix(".new")
            scratch.write_text(text.replace(old, new))
            os.utime(scratch, ns=(time.time_ns(), time.time_ns() + done * 10**9))
            scratch.replace(path)


def _per_prompt(events: list) -> list[tuple[PromptStarted, list[RoundVerified]]]:
    prompts: list = []
    for ev in events:
        if isinstance(ev, PromptStarted):
            prompts.append((ev, []))
        elif isinstance(ev, RoundVerified):
            prompts[-1][1].append(ev)
    return prompts


def _check_each_edit_in_force_from_the_next_prompt(events: list) -> None:
    prompts = _per_prompt(events)
    assert [s.prompt_class for s, _ in prompts[:8]] == ["given", "chat"] * 4
    reloads = [e for e in events if isinstance(e, PolicyLoaded)][1:5]
    assert [e.accepted for e in reloads] == [True] * 4
    assert [e.changed for e in reloads] == [["chat"], ["given"], ["chat"], ["given"]]
    # draft_len 3 for chat from prompt 4 (its first after the edit): no round drafts past 3
    started, rounds = prompts[3]
    assert started.draft_len == 3 and {r.draft_len for r in rounds} <= {0, 3} and any(r.draft_len == 3 for r in rounds)
    assert max(r.draft_len for r in prompts[1][1]) == 6  # before the edit: the range's start
    # speculate = "off" for given from prompt 5: every round plain
    started, rounds = prompts[4]
    assert started.draft_len == 0 and all(r.draft_len == 0 and not r.proposed for r in rounds)
    # speculate = "on" for chat from prompt 8: the plain lookup at k=3 (no match recorded), not the cut drafts
    drafted = [r for r in prompts[7][1] if r.proposed]
    assert all(r.matched == 0 and r.draft_len == 3 for r in drafted)
    assert any(r.matched >= 2 for _, rs in prompts[:7] for r in rs if r.prompt_class == "chat" and r.proposed)
    # match = { tag = "given" }: the next given prompt (prompt 9, a rewrite) is no longer given
    assert prompts[8][0].prompt_class == "chat"
    # the classes pane's state after each reload: the policy in force, k (0: off)
    state, in_force = ViewState(), []
    for ev in events:
        state.apply([ev])
        if isinstance(ev, PolicyLoaded) and ev in reloads:
            in_force.append(dict(state.draft_len_by_class))
    assert 0 < in_force[0]["chat"] <= 3 and in_force[1]["given"] == 0  # chat's longest verified draft, within 3


@pytest.mark.slow
def test_every_edit_of_a_live_runs_policy_is_in_force_from_its_classes_next_prompt(tmp_path, profile, pair):
    path, log = tmp_path / "p.toml", tmp_path / "run.specmon"
    path.write_text(POLICY)
    policy = load_policy(str(path))
    with live_session(pair, profile, log, serve=False, policy=policy, announce=False) as session:
        scheduler = PolicyScheduler(
            session.driver,
            PolicyEngine(policy, session.session_id, session.costs),
            pair.drafter,
            on_reload=None,
            poll_s=0.0,
        )
        scheduler.run(_prompts(), profile.sampling.to_event(), MAX_NEW, on_prompt=lambda done: _edit(path, done))
    _check_each_edit_in_force_from_the_next_prompt(list(read_log(log)))


@pytest.mark.slow
def test_every_edit_of_a_live_servers_policy_is_in_force_from_its_classes_next_request(
    tmp_path, profile, pair, monkeypatch
):
    monkeypatch.setenv("SPECMON_POLICY_POLL_S", "0")  # each request looks, whenever the idle look last did
    path, log = tmp_path / "p.toml", tmp_path / "serve.specmon"
    path.write_text(POLICY)
    with serving(profile, pair, path, log) as http:
        for done, prompt in enumerate(_prompts(), start=1):
            ask(http, prompt.text)
            _edit(path, done)
        path.write_text(path.read_text().replace('name = "chat"', 'name = "talk"'))
        os.utime(path, ns=(time.time_ns(), time.time_ns() + 99 * 10**9))
        gone = http.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "specmon_class": "chat"},
        )
    assert gone.status_code == 400 and gone.json()["error"]["param"] == "specmon_class"
    assert "'chat'" in gone.json()["error"]["message"] and "talk" in gone.json()["error"]["message"]
    events = list(read_log(log))
    renamed = [e for e in events if isinstance(e, PolicyLoaded)][-1]
    assert renamed.changed == ["talk", "chat"] and [c.name for c in renamed.classes] == ["given", "talk"]
    assert not any(
        isinstance(e, PromptStarted) and e.prompt_class == "chat" and e.prompt_tokens < 12 for e in events
    )  # the refused request was never decoded
    _check_each_edit_in_force_from_the_next_prompt(events)


def _last_event(log: Path):
    """The log's last event, None while a frame is half written."""
    last = None
    try:
        for last in read_log(log):
            pass
    except LogDamaged:
        return None
    return last


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_a_refused_edits_whole_reason_is_on_a_real_80x24_terminal(tmp_path):
    path, log, prompts = tmp_path / "p.toml", tmp_path / "run.specmon", tmp_path / "many.jsonl"
    path.write_text(POLICY)
    prompts.write_text(
        "".join(json.dumps({"id": f"p{i}", "prompt": "Tell me about the sea."}) + "\n" for i in range(400))
    )
    session = f"specmon-edit-{os.getpid()}"
    cmd = (
        f"cd {REPO} && TERM=xterm-256color SPECMON_POLICY_POLL_S=0 {REPO}/.venv/bin/specmon run --policy {path} "
        f"--prompts {prompts} --max-new-tokens 8 --log {log}; sleep 60"
    )
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "80", "-y", "24", cmd], check=True)
    try:
        wait_until(lambda: log.exists() and log.stat().st_size > 20_000, "decoding has begun", timeout=240)
        bad = path.read_text().replace("draft_len = 8", 'draft_len = "eight, as many as the last class has"')
        path.write_text(bad)
        with pytest.raises(SpecmonError) as refused:
            load_policy(str(path))
        reason = str(refused.value)
        assert reason.startswith(f"{path}:") and len(reason) > 80  # longer than a line: it has to wrap
        screen = wait_for_screen(session, lambda shown: "policy edit refused" in shown, "the refusal on screen")
        lines = screen.splitlines()
        assert len(lines) <= 24 and max(map(len, lines)) <= 80
        boxed = "".join(line.strip("│╭╮╰╯─ ") for line in lines)
        assert "".join(reason.split()) in "".join(boxed.split()), screen  # whole, across its wrapped lines
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        # quitting stops the decode after its round (the driver's stop), then the log ends
        finished = wait_until(
            lambda: isinstance(last := _last_event(log), SessionFinished) and last, "the log ended", 240, poll_s=0.2
        )
        assert finished.reason == "interrupted"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def test_metrics_show_the_policy_in_force_and_no_series_for_a_class_a_reload_removed():
    from specmon.events.schema import ClassInForce
    from specmon.server.metrics import ServerMetrics

    def loaded(*classes) -> PolicyLoaded:
        return policy_loaded(classes=list(classes))

    metrics = ServerMetrics()
    metrics.observe(loaded(ClassInForce("code-edit", True, 8), ClassInForce("chat", False, 6)))
    text = metrics.exposition().decode()
    assert (
        'specmon_policy_draft_len{class="code-edit"} 8.0' in text
        and 'specmon_policy_speculate{class="chat"} 0.0' in text
    )
    metrics.observe(loaded(ClassInForce("code", True, 3), ClassInForce("chat", True, 6)))
    text = metrics.exposition().decode()
    assert 'class="code-edit"' not in text and 'specmon_policy_draft_len{class="code"} 3.0' in text
    assert 'specmon_policy_speculate{class="chat"} 1.0' in text
