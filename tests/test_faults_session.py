"""Fault tier, session side: a prompt too long for the cache is found before the first round, and
SIGTERM/SIGHUP end a run the way Ctrl-C does (SessionFinished written, socket removed)."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from specmon.events.log import read_log
from specmon.events.schema import RoundVerified, SessionFinished
from tinymodel import tiny_profile
from waiting import wait_until

REPO = Path(__file__).resolve().parent.parent


def _specmon(*args: str) -> list[str]:
    return [sys.executable, "-m", "specmon.cli", *args]


def test_a_prompt_too_long_for_the_cache_is_refused_before_the_first_round(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    rows = [
        {"id": "short-1", "prompt": "Say hi."},
        {"id": "short-2", "prompt": "Say bye."},
        {"id": "huge", "prompt": "word " * 5000},
    ]  # byte-level vocabulary: far past 4096 positions
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    log = tmp_path / "x.specmon"
    done = subprocess.run(
        _specmon(
            "run", "--headless", "--profile", str(tiny_profile(tmp_path)), "--prompts", str(prompts), "--log", str(log)
        ),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("specmon: prompt 'huge': ") and "exceed the cache's 4096" in last
    events = list(read_log(log))
    assert not any(isinstance(e, RoundVerified) for e in events)  # nothing decoded: found up front
    assert isinstance(events[-1], SessionFinished) and events[-1].reason == "error"


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_end_the_session_like_ctrl_c(tmp_path, signum):
    runtime = tmp_path / "runtime"
    log = tmp_path / "x.specmon"
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    proc = subprocess.Popen(
        _specmon("run", "--headless", "--profile", str(tiny_profile(tmp_path, max_new_tokens=400)), "--log", str(log)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
    )
    wait_until(lambda: log.exists() and log.stat().st_size >= 20_000, "the run well into its decode", timeout=120)
    assert list((runtime / "specmon").glob("*.sock")), "a running session serves a socket"
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum
    assert "\nclass " in stdout and "prompts: decoded at that k" in stdout  # the table of what finished
    assert stderr.strip().splitlines()[-1] == (
        f"specmon: ended by {signal.Signals(signum).name}; the session log keeps every finished round"
    )
    events = list(read_log(log))  # whole: no damage
    assert isinstance(events[-1], SessionFinished) and events[-1].reason == "interrupted"
    assert events[-1].rounds == sum(isinstance(e, RoundVerified) for e in events) > 0
    assert list((runtime / "specmon").glob("*.sock")) == []
