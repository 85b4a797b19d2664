"""A terminal that hangs up ends every command as `q` (or Ctrl-C, headless) does. Each command starts in a
tmux session of its own at 80x24 (as over SSH), with its live view or headless; once it is up, the
session is killed (as a dropped connection); the process must be gone within 5 s and its log end with
SessionFinished, for a reason that is not "error".

Two ways: as the pane's own process, which the kernel sends SIGHUP and SIGCONT; and under `setsid`,
which it sends nothing (as a command whose shell does not pass the SIGHUP on), so only EOF and EIO on
the terminal say it has gone. Before the fix the second left `specmon run` spinning at 100% of a core."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from specmon.events.log import read_log
from specmon.events.schema import RoundVerified, SessionFinished
from waiting import wait_for_screen, wait_until

REPO = Path(__file__).resolve().parent.parent
SPECMON = f"{REPO}/.venv/bin/specmon"
FIXTURE = REPO / "tests" / "fixtures" / "session-tui.specmon"
GONE_S = 5.0  # the bound: a closed terminal, then no process within this
LIVE = r"\bq quit\b"  # the footer: the view is up and reading keys
WAYS = {"signalled": "exec", "unsignalled": "exec setsid -w"}  # setsid: the hang-up signals reach it not

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None or shutil.which("setsid") is None, reason="needs tmux, setsid"),
]


@pytest.fixture(scope="module")
def backing(tmp_path_factory):
    """A headless `specmon serve` for attach (its socket), watch and proxy (its URL) to look at; (url, socket)."""
    folder = tmp_path_factory.mktemp("backing")
    err = folder / "stderr"
    with open(err, "w") as stderr:
        server = subprocess.Popen(
            [SPECMON, "serve", "--headless", "-k", "3", "--port", "0", "--log", str(folder / "serve.specmon")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            cwd=REPO,
        )
    try:
        said = wait_until(lambda: "serving" in err.read_text() and err.read_text(), "the backing server up", 240)
        url = re.search(r"on (http://\S+)/v1", said).group(1)
        sock = re.search(r"specmon\s+attach\s+(\S+)", said).group(1)  # the line wraps at 80 columns
        yield url, sock
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(60)


def commands(tmp_path: Path, url: str, sock: str, view: str) -> dict[str, tuple[str, Path | None, str]]:
    """Each command's arguments, the log it writes (attach and replay write none) and what it shows once
    up; headless, every command that has a live view and a headless mode (replay's is `log info`)."""
    log = {name: tmp_path / f"{name}.specmon" for name in ("run", "serve", "watch", "proxy")}
    if view == "live":
        return {
            "run": (f"run --classes rewrite --max-new-tokens 400 -k 3 --log {log['run']}", log["run"], LIVE),
            "serve": (f"serve -k 3 --port 0 --log {log['serve']}", log["serve"], LIVE),
            "attach": (f"attach {sock}", None, LIVE),
            "watch": (f"watch {url} --log {log['watch']}", log["watch"], LIVE),
            "proxy": (f"proxy --upstream {url} --port 0 --log {log['proxy']}", log["proxy"], LIVE),
            "replay": (f"replay {FIXTURE}", None, LIVE),
        }
    return {
        "run": (f"run --headless --classes rewrite --max-new-tokens 400 -k 3 --log {log['run']}", log["run"], "0/4"),
        "serve": (f"serve --headless -k 3 --port 0 --log {log['serve']}", log["serve"], "serving"),
        "attach": (f"attach --headless {sock}", None, "drafter ngram"),
        "watch": (f"watch --headless {url} --log {log['watch']}", log["watch"], "metrics"),
        "proxy": (f"proxy --headless --upstream {url} --port 0 --log {log['proxy']}", log["proxy"], "proxying"),
    }


def specmon_pid(session: str) -> int:
    """The specmon process in a session's pane: the pane's own, or (under setsid -w) its one child."""
    shown = subprocess.run(["tmux", "display", "-p", "-t", session, "#{pane_pid}"], capture_output=True, text=True)
    pid = int(shown.stdout)
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return int(children[0]) if children else pid


def alive(pid: int) -> bool:
    """Running, not a zombie its parent has yet to reap."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("view", ["live", "headless"])
def test_a_closed_terminal_ends_every_command_and_its_log(tmp_path, backing, view, way):
    started = commands(tmp_path, *backing, view)
    sessions = {name: f"specmon-hup-{os.getpid()}-{name}" for name in started}
    pids: dict[str, int] = {}
    try:
        for name, (args, _, _) in started.items():
            line = f"cd {REPO} && TERM=xterm-256color {WAYS[way]} {SPECMON} {args}"
            subprocess.run(
                ["tmux", "new-session", "-d", "-s", sessions[name], "-x", "80", "-y", "24", line], check=True
            )
        for name, session in sessions.items():
            up = started[name][2]
            wait_for_screen(session, lambda shown: re.search(up, shown), f"{name} up ({view})")
            pids[name] = specmon_pid(session)
        closed = {}
        for name, session in sessions.items():
            subprocess.run(["tmux", "kill-session", "-t", session], check=True)
            closed[name] = time.monotonic()
        for name, pid in pids.items():
            left = GONE_S - (time.monotonic() - closed[name])
            wait_until(
                lambda: not alive(pid), f"{name} (pid {pid}) gone {GONE_S:.0f} s after its terminal closed", left
            )
        for name, (_, log, _) in started.items():
            if log is None:
                continue
            events = list(read_log(log))
            assert isinstance(events[-1], SessionFinished), f"{name}'s log ends with {type(events[-1]).__name__}"
            assert events[-1].rounds == sum(isinstance(e, RoundVerified) for e in events), name
            assert events[-1].reason in ("done", "interrupted"), name
    finally:
        for session in sessions.values():
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        for pid in pids.values():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)  # a process the fix failed to end is not left spinning
