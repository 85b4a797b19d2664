"""`specmon proxy` as a user starts it: its own process, headless, stopped by Ctrl-C."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass

import httpx


@dataclass
class ProxyRun:
    proc: subprocess.Popen
    url: str = ""  # where it listens, once it said so
    out: str = ""  # stdout whole, once it stopped
    err: str = ""  # stderr whole, once it stopped


@contextlib.contextmanager
def proxy_command(*argv: str, columns: int = 100):
    """`specmon proxy ARGV`, serving by the block's start (its /health answered) and sent Ctrl-C at its end;
    the run's out, err and proc.returncode are there after the block."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "specmon.cli", "proxy", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": str(columns)},
        # Ctrl-C as from a terminal: a pytest started in the background (`&`) ignores SIGINT, and so would it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    run, said = ProxyRun(proc), ""
    try:
        while "proxying" not in said:
            said += proc.stderr.readline()
            assert proc.poll() is None, said
        run.url = re.search(r"proxying (http://[\d.]+:\d+)/v1", said).group(1)
        # serving, so uvicorn's handler takes the Ctrl-C (one that lands before is lost in a weakref callback)
        assert httpx.get(run.url + "/health").status_code == 200
        yield run
    finally:
        proc.send_signal(signal.SIGINT)
        run.out, rest = proc.communicate(timeout=60)
        run.err = said + rest
