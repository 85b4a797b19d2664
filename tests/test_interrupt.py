"""A Ctrl-C that comes before uvicorn's own handler is in (right after `serve` or `proxy` printed its
start line) ends the server as one that comes later does, instead of landing wherever Python is (in a
weakref callback it is printed and dropped, and the server went on serving)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from specmon.server.runner import bind, interrupt_when_up, uvicorn_config
from upstream import FakeUpstream

import uvicorn


async def _app(scope, receive, send):  # an ASGI app that is never asked anything
    pass


def _server() -> tuple[uvicorn.Server, object]:
    return uvicorn.Server(uvicorn_config(_app, 5.0, 16)), bind("127.0.0.1", 0)


def test_a_ctrl_c_in_the_block_is_held_to_its_end_and_asks_the_server_to_exit():
    server, sock = _server()
    reached = []
    with pytest.raises(KeyboardInterrupt):
        with interrupt_when_up(server):
            signal.raise_signal(signal.SIGINT)
            reached.append("after")  # not raised here, mid-statement
            assert server.should_exit
    sock.close()
    assert reached == ["after"]
    assert signal.getsignal(signal.SIGINT) is not None  # the handler before it is back


@pytest.mark.parametrize("when", ["before it serves", "while it serves"])
def test_a_real_uvicorn_server_stops_and_the_interrupt_is_raised_after(when):
    server, sock = _server()
    if when == "while it serves":  # uvicorn's handler takes it, and hands it back at its end
        threading.Thread(target=lambda: (_wait(lambda: server.started), os.kill(os.getpid(), signal.SIGINT))).start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with interrupt_when_up(server):
            if when == "before it serves":
                signal.raise_signal(signal.SIGINT)
            server.run(sockets=[sock])
    sock.close()
    assert time.monotonic() - t0 < 10


def _wait(ready, timeout_s: float = 10.0) -> None:
    end = time.monotonic() + timeout_s
    while not ready() and time.monotonic() < end:
        time.sleep(0.01)


def test_the_proxy_ends_on_a_ctrl_c_sent_the_instant_it_says_proxying(tmp_path):
    with FakeUpstream() as upstream:
        for attempt in range(3):  # the race was one in several starts: three, each Ctrl-C'd at once
            proc = subprocess.Popen(
                [sys.executable, "-m", "specmon.cli", "proxy", "--upstream", upstream.url, "--port", "0"]
                + ["--headless", "--log", str(tmp_path / f"{attempt}.specmon")],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            )
            said = ""
            while "proxying" not in said:
                said += proc.stderr.readline()
                assert proc.poll() is None, said
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=20)
            assert proc.returncode == 130, said + err
            assert re.search(r"log: \S+\.specmon", out), out  # the end table, as after any Ctrl-C
