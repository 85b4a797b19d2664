"""A real llama-server for the watch and proxy tests: built by scripts/setup-llama-server (or named by
$LLAMA_SERVER), serving the embedded GGUF with --metrics. Tests that need one skip, saying why, where
it is not built; the recorded scrapes and replies in tests/fixtures/ run everywhere."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from specmon.backends import modelstore

ROOT = Path(__file__).resolve().parent.parent
# ngram-simple looks up 12 tokens by default: on short replies it never drafts; 3 finds repeats in a prompt
NGRAM = ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3", "--spec-ngram-simple-size-m", "8")


def binary() -> Path | None:
    for candidate in (os.environ.get("LLAMA_SERVER"), ROOT / ".venv/bin/llama-server"):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Path(candidate)
    found = shutil.which("llama-server")
    return Path(found) if found else None


def needs_llama_server() -> Path:
    """The binary, or skip the test with the reason."""
    path = binary()
    if path is None:
        pytest.skip("no llama-server built: bash scripts/setup-llama-server (about 10 minutes), or set $LLAMA_SERVER")
    return path


def self_draft() -> tuple[str, ...]:
    """The embedded GGUF as its own draft model: every draft is accepted when greedy. (-md alone drafts
    nothing: this build's --spec-type defaults to none.)"""
    model = str(modelstore.resolve(modelstore.SMOLLM2.name))
    return ("--spec-type", "draft-simple", "-md", model, "--spec-draft-n-max", "4")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def llama_server(log_dir: Path, spec: tuple[str, ...] = NGRAM, slots: int = 1) -> Iterator[str]:
    """Start llama-server on the embedded GGUF (2 threads, --metrics) and yield its base URL once
    /health answers 200; stop it on leaving. `spec`: its speculation flags (() for none)."""
    path = needs_llama_server()
    port = free_port()
    args = [str(path), "-m", str(modelstore.resolve(modelstore.SMOLLM2.name)), "--host", "127.0.0.1"]
    args += ["--port", str(port), "-np", str(slots), "-c", "2048", "-t", "2", "--metrics", "--no-webui", *spec]
    log = open(log_dir / f"llama-server-{port}.log", "wb")
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_ready(process, f"http://127.0.0.1:{port}", log_dir / f"llama-server-{port}.log")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def wait_ready(process: subprocess.Popen, url: str, log: Path, timeout_s: float = 120.0) -> None:
    """Poll /health (503 while the model loads) until 200, the process exits, or the deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llama-server exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass  # not listening yet, or loading
        time.sleep(0.2)
    raise RuntimeError(f"llama-server not ready after {timeout_s:.0f} s: {log.read_text()[-2000:]}")
