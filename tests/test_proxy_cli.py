"""`specmon proxy` on the command line: a mistake a user can make is one line and exit 2, before any
log is opened; headless, a line per request and, at Ctrl-C, the per-class table and the advice."""

from __future__ import annotations

import importlib
import re
import socket

import httpx
import pytest
from upstream import FakeUpstream, request_body
from proxycli import proxy_command
from waiting import wait_until


cli = importlib.import_module("specmon.cli.main")


@pytest.fixture
def specmon(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)

    def run(*argv: str) -> tuple[int, str]:
        code = cli.main(["proxy", *argv])
        return code, capsys.readouterr().err

    return run


def refused_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_mistakes_are_one_line_and_open_no_log(specmon, tmp_path):
    with FakeUpstream() as fake, socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        cases = {
            ("--upstream", "127.0.0.1:8080"): "--upstream 127.0.0.1:8080: expected http://HOST:PORT",
            ("--upstream", "ftp://h:1"): "expected http://HOST:PORT",
            ("--upstream", refused_port()): "cannot reach it (connection refused); is the server running?",
            ("--upstream", "http://upstream.invalid:8080"): "cannot reach it (cannot resolve the host: ",  # RFC 2606
            ("--upstream", fake.url, "--plain-upstream", refused_port()): "--plain-upstream",
            ("--upstream", fake.url, "--port", port): f"cannot listen on 127.0.0.1:{port} (address already in use)",
            ("--upstream", fake.url, "--api-key-file", "absent"): "--api-key-file absent: cannot read it",
            ("--upstream", fake.url, "--policy", "absent.toml"): "absent.toml",
        }
        for argv, said in cases.items():
            code, err = specmon(*argv, "--headless", "--log", str(tmp_path / "p.specmon"))
            lines = err.strip().splitlines()
            assert code == 2 and len(lines) == 1 and lines[0].startswith("specmon: "), (argv, err)
            assert said.lower() in lines[0].lower(), (argv, err)
            assert not (tmp_path / "p.specmon").exists()


def test_headless_a_line_per_request_and_the_table_and_advice_at_ctrl_c(tmp_path):
    log = tmp_path / "p.specmon"
    with FakeUpstream() as spec, FakeUpstream("-plain") as plain:
        argv = ["--upstream", spec.url, "--plain-upstream", plain.url, "--plain-share", "0.5"]
        argv += ["--port", "0", "--headless", "--log", str(log)]
        with proxy_command(*argv) as run:
            for _ in range(4):
                assert httpx.post(run.url + "/v1/chat/completions", json=request_body("chat")).status_code == 200
            wait_until(lambda: log.stat().st_size > 0 and len(plain.requests) == 2, "four requests logged")
    out, err, proc = run.out, run.err, run.proc
    lines = [line for line in out.splitlines() if re.match(r"specmon: 200 [0-9a-f]{8} chat ", line)]
    assert len(lines) == 4 and " chat upstream=spec acc=24/24 tokens=32 " in lines[0]
    assert " chat upstream=plain acc=- tokens=32 " in lines[1]
    assert re.search(r"chat\s+spec\s+2\s+48\s+48\s+1\.00", out)
    assert re.search(r"chat\s+plain\s+2\s+-\s+-\s+-\s", out)  # the plain side is not meant to draft
    # the recorded spec reply decoded slower than the plain one (a busy host): every pair says so alike
    assert "speculation costs; change: would set speculate" in out and "applied by routing" in out
    assert proc.returncode == 130 and "interrupted" in err
