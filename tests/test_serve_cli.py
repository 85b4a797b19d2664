"""`specmon serve` as a user runs it: a real subprocess, its one-line refusals, its headless lines,
SIGTERM, and the commands that read a session log working on a server's log."""

import re
import signal
import socket
import subprocess
from pathlib import Path
from types import SimpleNamespace

import httpx
import openai
import pytest

from specmon.events.log import read_log
from specmon.events.schema import SessionFinished
from specmon.server.records import short_id
from specmon.server.runner import request_line
from specmoncli import finished_prompts, specmon, started
from tinymodel import tiny_profile
from waiting import wait_until

HELLO = [{"role": "user", "content": "Say hello."}]


def one_line_error(done: subprocess.CompletedProcess, *fragments: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> Path:
    return tiny_profile(tmp_path_factory.mktemp("tiny"), max_new_tokens=16)


def key_file(tmp_path: Path, key: str = "k3y-for-tests", mode: int = 0o600) -> Path:
    path = tmp_path / "key"
    path.write_text(key + "\n")
    path.chmod(mode)
    return path


def test_a_host_others_can_reach_needs_a_key(profile):
    one_line_error(
        specmon("serve", "--headless", "--profile", profile, "--host", "0.0.0.0"), "--host 0.0.0.0", "--api-key-file"
    )


def test_a_key_file_others_can_read_is_refused(tmp_path, profile):
    path = key_file(tmp_path, mode=0o644)
    done = specmon("serve", "--headless", "--profile", profile, "--api-key-file", path)
    one_line_error(done, str(path), "chmod 600")
    assert "k3y-for-tests" not in done.stderr


def test_a_policy_and_a_fixed_k_are_refused_together(profile):
    one_line_error(
        specmon("serve", "--headless", "--profile", profile, "--policy", "default", "-k", "2"),
        "--draft-len",
        "--policy",
    )


def test_headless_serving_then_sigterm_leaves_a_log_every_command_reads(tmp_path, profile):
    key, log = "k3y-for-tests", tmp_path / "serve.specmon"
    listen = ["--host", "0.0.0.0", "--port", 0, "--api-key-file", key_file(tmp_path, key)]
    proc = started("serve", "--headless", "--profile", profile, *listen, "--log", log)
    try:
        banner = ""
        while not banner.startswith("specmon: serving"):
            banner = proc.stderr.readline()
            assert banner, "serve ended before it served"
        port = int(re.search(r"http://0\.0\.0\.0:(\d+)/v1", banner).group(1))
        api = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0)
        reply = api.chat.completions.create(model="t", messages=HELLO, max_tokens=8)
        refused = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json={"messages": HELLO})
        streamed = list(api.chat.completions.create(model="t", messages=HELLO, max_tokens=8, stream=True))
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert refused.status_code == 401
    assert proc.returncode == 128 + signal.SIGTERM, err
    lines = out.splitlines()
    assert len(lines) == 3, out
    assert lines[0].startswith(f"specmon: 200 {short_id(reply.id)} chat ") and "finish=length" in lines[0]
    assert lines[1].startswith("specmon: 401 /v1/chat/completions: missing or incorrect API key")
    assert lines[2].startswith(f"specmon: 200 {short_id(streamed[0].id)} ")
    assert key not in out + err + banner
    events = list(read_log(log))
    assert [e.prompt_id for e in finished_prompts(events)] == [reply.id, streamed[0].id]
    assert isinstance(events[-1], SessionFinished) and events[-1].reason == "interrupted"
    info = specmon("log", "info", log)
    assert info.returncode == 0 and "integrity        ok" in info.stdout
    assert re.search(r"PromptFinished\s+2", info.stdout) and "chat" in info.stdout
    assert specmon("policy", "explain", log).returncode == 0
    replay = specmon("replay", "--headless", log)
    assert replay.returncode == 0 and "chat" in replay.stdout
    report = specmon("report", log, "--out", tmp_path / "report")
    assert report.returncode == 0 and (tmp_path / "report" / "report.md").exists()


def test_a_port_in_use_is_refused_before_the_model_loads_and_leaves_no_log(tmp_path, profile):
    import socket

    log = tmp_path / "never.specmon"
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = specmon("serve", "--headless", "--profile", profile, "--port", port, "--log", log)
    one_line_error(done, f"cannot listen on 127.0.0.1:{port}", "in use")
    assert "while attempting" not in done.stderr  # the OS's reason once, not wrapped twice
    assert not log.exists(), "no session is opened for a server that cannot listen"
    assert "loading" not in done.stderr and "logging to" not in done.stderr


def test_sigterm_while_the_model_loads_says_no_log_was_written(tmp_path, profile):
    """serve listens, then imports torch and loads the model: a SIGTERM once it listens lands in the load."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path / "serve.specmon"
    proc = started("serve", "--headless", "--profile", profile, "--port", port, "--log", log)
    try:
        wait_for_listener(port, proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert err.strip().splitlines() == ["specmon: ended by SIGTERM while the model was loading; no log was written"]
    assert not log.exists()


def wait_for_listener(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    def listening() -> bool:
        assert proc.poll() is None, f"serve exited ({proc.returncode}) before it listened on {port}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return False
        return True

    wait_until(listening, f"serve listening on {port}", timeout)


def test_the_headless_record_is_one_line_within_80_columns(monkeypatch):
    """The trial's serve lines were 104-123 columns (`200 chat chatcmpl-2ec5b98467274517a41f1942 class=chat …
    finish=stop`): a short id, no endpoint beside the class, and a finish said where it is not `stop`."""
    job = SimpleNamespace(request=SimpleNamespace(endpoint="chat"), arrived=0.0, ttft_s=0.184)
    info = SimpleNamespace(
        prompt_id="chatcmpl-2ec5b98467274517a41f1942",
        prompt_class="chat",
        draft_lens=[8] * 7,
        draft_len=8,
        round_ids=list(range(7)),
    )
    done = SimpleNamespace(
        info=info, usage=SimpleNamespace(prompt_tokens=48, completion_tokens=8), finish_reason="stop"
    )
    monkeypatch.setattr("time.perf_counter", lambda: 8 / 13.9)  # tok/s is over the time since it arrived (0.0)
    record = request_line(job, done, 200)
    assert f"specmon: {record}" == "specmon: 200 2ec5b984 chat k=8 rounds=7 tokens=48+8 ttft=184ms tok/s=13.9"
    done.finish_reason, info.prompt_class = "length", "non-english"
    monkeypatch.setattr("time.perf_counter", lambda: 1.0)
    assert request_line(job, done, 499).split() == [
        "499", "2ec5b984", "non-english", "k=8", "rounds=7", "tokens=48+8", "ttft=184ms", "tok/s=8.0", "finish=length"
    ]  # fmt: skip
