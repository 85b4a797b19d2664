"""specmon watch against a real llama-server (skipped, with the reason, where none is built): the watch's
totals equal the server's own counter deltas, and a server killed and started again mid-watch is one line
and splits the totals."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest


import llama_server as ls
from waiting import wait_until
from specmon.errors import SpecmonError
from specmon.events.log import read_log
from specmon.events.schema import ServerScraped, SessionFinished
from specmon.metrics import served
from specmon.watch.exposition import read, samples

WATCH = [sys.executable, "-m", "specmon.cli", "watch"]
DEADLINE_S = 120.0
pytestmark = pytest.mark.slow  # a real server decoding 20 requests: minutes on 2 cores


def counters(url: str):
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as reply:
        return read(samples(reply.read().decode()), "llama-server")


def complete(url: str, prompt: str, max_tokens: int = 12) -> dict:
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}).encode()
    request = urllib.request.Request(f"{url}/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as reply:
        return json.loads(reply.read())


def scrapes(log: Path) -> list[ServerScraped]:
    """The reads logged so far (a frame being written when we look is left for the next look)."""
    found = []
    try:
        for ev in read_log(log):
            if isinstance(ev, ServerScraped):
                found.append(ev)
    except (SpecmonError, FileNotFoundError):
        pass
    return found


def wait_for(condition, what: str):
    return wait_until(condition, what, timeout=DEADLINE_S, poll_s=0.1)  # a read every 0.5 s: no need to look faster


def start_watch(url: str, log: Path) -> subprocess.Popen:
    args = [*WATCH, "--headless", "--interval", "0.5", "--log", str(log), url]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stop_watch(watch: subprocess.Popen) -> tuple[str, str]:
    watch.send_signal(signal.SIGTERM)
    out, err = watch.communicate(timeout=60)
    assert watch.returncode == 128 + signal.SIGTERM, err
    return out, err


@pytest.mark.parametrize("spec", ["self-draft", "ngram"])
def test_watch_totals_equal_the_servers_counter_deltas_over_20_requests(tmp_path, spec):
    """Self-draft accepts every draft; the n-gram drafter's are partly rejected, so the rates are not all 1."""
    ls.needs_llama_server()
    log = tmp_path / "watch.specmon"
    with ls.llama_server(tmp_path, spec=ls.self_draft() if spec == "self-draft" else ls.NGRAM) as url:
        watch = start_watch(url, log)
        try:
            wait_for(lambda: [s for s in scrapes(log) if not s.error], "the watch's first good read")
            before = counters(url)
            for i in range(20):  # repeats the n-gram drafter finds in the prompt, some of them broken
                pattern = "a b c d e f g " * 3 if i % 2 else f"red green blue red green {i} red green blue red green "
                complete(url, pattern + "a b c" if i % 2 else pattern, max_tokens=24)
            after = counters(url)
            read_at = time.time()
            wait_for(lambda: [s for s in scrapes(log) if s.t > read_at and not s.error], "a read after the requests")
        finally:
            out, err = stop_watch(watch)
    got = scrapes(log)
    total = served.total(got)
    deltas = (after.drafts - before.drafts, after.draft_tokens - before.draft_tokens, after.accepted - before.accepted)
    assert deltas[0] > 0, "the server drafted nothing: is speculation on?"
    assert (total.drafts, total.draft_tokens, total.accepted) == deltas
    padded = before.accepted_per_pos + [0] * (len(after.accepted_per_pos) - len(before.accepted_per_pos))
    assert list(total.accepted_per_pos) == [a - b for a, b in zip(after.accepted_per_pos, padded)]
    assert total.generation_tokens == after.generation_tokens - before.generation_tokens
    print(f"server deltas: drafts, draft tokens, accepted {deltas}, per position {list(total.accepted_per_pos)}")
    print(out)
    totals = [line for line in out.splitlines() if line.startswith("total ")]
    assert totals and f"drafts {deltas[0]}  draft tokens {deltas[1]}  accepted {deltas[2]}" in totals[-1]
    assert isinstance(list(read_log(log))[-1], SessionFinished)


def test_a_server_killed_and_started_again_is_one_line_and_splits_the_totals(tmp_path, monkeypatch):
    ls.needs_llama_server()
    log = tmp_path / "watch.specmon"
    port = ls.free_port()
    monkeypatch.setattr(ls, "free_port", lambda: port)  # the second server comes back on the first's port
    spec = ls.self_draft()
    with ls.llama_server(tmp_path, spec=spec) as url:
        watch = start_watch(url, log)
        wait_for(lambda: [s for s in scrapes(log) if not s.error], "the watch's first good read")
        complete(url, "Count from 1 to 20:")
        first_run = counters(url)
        read_at = time.time()
        wait_for(lambda: [s for s in scrapes(log) if s.t > read_at and not s.error], "a read after the request")
    try:
        wait_for(lambda: [s for s in scrapes(log) if s.error], "a failed read once the server is gone")
        with ls.llama_server(tmp_path, spec=spec) as url:
            complete(url, "Count from 1 to 10:")
            second_run = counters(url)
            read_at = time.time()
            wait_for(lambda: [s for s in scrapes(log) if s.t > read_at and not s.error], "a read after the restart")
    finally:
        out, err = stop_watch(watch)
    print(out)
    assert sum(": down: connection refused" in line for line in out.splitlines()) == 1
    assert sum("is back, restarted" in line for line in out.splitlines()) == 1
    total = served.total(scrapes(log))
    assert len(served.runs(scrapes(log))) == 2
    assert total.drafts == first_run.drafts + second_run.drafts  # each run from zero: nothing lost, nothing spanned
    assert total.accepted == first_run.accepted + second_run.accepted
