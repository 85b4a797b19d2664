"""One live session, seen from every side: a disk that fills mid-run, the same figures in every
output (table, --json, report, log info, the TUI's fold), and `specmon bench policy`.
Real subprocesses on the tiny model; the full-disk test mounts a real tmpfs (root only)."""

import json
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import msgspec
import pytest

from specmon.events.log import LogWriter, read_log
from specmon.events.schema import Decision, RoundVerified, SessionFinished
from specmon.metrics.contention import disturbed, stall_share, tally
from specmon.metrics.stats import class_stats, summary
from specmon.replay.player import ReplayFeed
from specmon.sched.bench import bench_results
from specmon.transport.channel import Channel, LogSink
from specmon.transport.serve import EventServer
from specmon.transport.sessions import live_sessions
from specmon.tui.state import ViewState
from specmoncli import finished_prompts, specmon
from test_tui_view import FIXTURES, TUI_EVENTS
from tinymodel import tiny_profile

WRITE_FAILED = "writing the session log failed"


def as_json(value):
    """The shape a value has once written as JSON and read back (tuples become lists, keys strings)."""
    return json.loads(json.dumps(value))


def assert_same_figures(expected: dict, actual: dict, where: str) -> None:
    """Per class, per field, so a failure names the figure that differs."""
    assert set(actual) == set(expected), where
    assert list(actual["classes"]) == list(expected["classes"]), f"{where}: classes"
    for name, row in expected["classes"].items():
        got = actual["classes"][name]
        assert set(got) == set(row), f"{where}: {name} fields"
        for field, value in row.items():
            assert got[field] == value, f"{where}: {name}.{field}: {got[field]!r} != {value!r}"


def table_lines(stdout: str) -> list[str]:
    """The per-class tables in a command's output: from the first header to the legend, title left out."""
    lines = stdout.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("class "))
    bottom = next(i for i, line in enumerate(lines) if line.startswith("prompts: "))
    return [line.rstrip() for line in lines[top:bottom]]


def fold(feed: ReplayFeed) -> ViewState:
    """What the TUI's panes hold after replaying the whole log."""
    state = ViewState()
    while not feed.done.is_set():
        state.apply(feed.drain())
    return state


# -- a disk that fills mid-run ---------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A real 64 KiB tmpfs: the session log fills it a few prompts into the run."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


def test_a_full_disk_ends_the_run_with_one_line_and_keeps_what_was_written(tmp_path, small_disk):
    log = small_disk / "x.specmon"
    done = specmon(
        "run", "--headless", "--profile", tiny_profile(tmp_path), "--log", log, "--max-new-tokens", 48, cwd=tmp_path
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"specmon: {log}: {WRITE_FAILED} (No space left on device)"), done.stderr
    assert done.stderr.count(WRITE_FAILED) == 1, done.stderr

    info = specmon("log", "info", log, cwd=tmp_path)
    assert info.returncode == 0, info.stdout
    assert "integrity        ok" in info.stdout
    events = list(read_log(log))
    rounds = sum(isinstance(e, RoundVerified) for e in events)
    assert rounds > 0 and re.search(rf"RoundVerified\s+{rounds}\n", info.stdout)
    # The disk filled mid-run: not every prompt finished, and the session never said it had.
    assert 0 < len(finished_prompts(events)) < 40
    assert not any(isinstance(e, SessionFinished) for e in events)
    # The count the error line promises is the count a reader gets back.
    promised = int(re.search(r"the (\d+) events before it are intact", last).group(1))
    assert promised == len(events)
    # The attach socket went away with the session.
    socket = re.search(r"watch with:\s+specmon\s+attach\s+(\S+)", done.stderr).group(1)  # wrapped at 80
    assert not Path(socket).exists()


# -- the same figures everywhere -------------------------------------------------------------

RUNS = {
    "plain": [],
    "policy": ["--policy", "default"],
}


@pytest.fixture(scope="module", params=sorted(RUNS))
def recorded_run(request, tmp_path_factory):
    """One real run on the tiny model: (its stdout, its --json summary, its log)."""
    tmp = tmp_path_factory.mktemp(f"run-{request.param}")
    out, log = tmp / "out.json", tmp / "s.specmon"
    done = specmon(
        "run",
        "--headless",
        "--profile",
        tiny_profile(tmp),
        "--classes",
        "rewrite,chat",
        "--max-new-tokens",
        16,
        "--json",
        out,
        "--log",
        log,
        *RUNS[request.param],
        cwd=tmp,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout, json.loads(out.read_text()), log


def test_json_report_and_replayed_tui_show_the_figures_of_the_log(recorded_run, tmp_path):
    _, written, log = recorded_run
    from_log = as_json(summary(class_stats(read_log(log))))
    assert set(from_log["classes"]) == {"rewrite", "chat"}
    assert all(row["rounds"] > 0 for row in from_log["classes"].values())
    assert_same_figures(from_log, written, "specmon run --json")

    report = specmon("report", log, "--out", tmp_path / "report")
    assert report.returncode == 0, report.stderr
    report_json = json.loads((tmp_path / "report" / "report.json").read_text())
    assert_same_figures(from_log, report_json["summary"], "report.json summary")

    state = fold(ReplayFeed(log))
    assert state.finished is not None and state.finished.reason == "done"
    assert_same_figures(from_log, as_json(summary(state.classes)), "TUI state folded from the log")


def test_log_info_prints_the_table_the_run_printed(recorded_run):
    stdout, _, log = recorded_run
    info = specmon("log", "info", log)
    assert info.returncode == 0, info.stdout
    assert "integrity        ok" in info.stdout
    printed = table_lines(stdout)
    assert sorted(
        {line.split()[0] for line in printed if line[:1].isalpha() and not line.startswith(("class", "a_i"))}
    ) == ["chat", "rewrite"]
    assert table_lines(info.stdout) == printed


# -- flags that cannot go together -----------------------------------------------------------


@pytest.mark.parametrize("flag", [["-k", "6"], ["--draft-len", "0"]])
def test_a_draft_length_with_a_policy_is_one_line(flag, tmp_path):
    done = specmon("run", "--policy", "default", *flag, cwd=tmp_path, timeout=60)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "-k/--draft-len cannot be used with --policy" in lines[0]
    assert not (tmp_path / "logs").exists(), "refused before a session log was opened"


# -- specmon bench policy --------------------------------------------------------------------

BENCH_FIELDS = {"plain", "fixed", "best_k", "auto", "auto_over_best", "auto_over_plain"}


def test_bench_policy_figures_are_recomputed_from_its_log(tmp_path):
    out, log = tmp_path / "bench.json", tmp_path / "bench.specmon"
    done = specmon(
        "bench",
        "policy",
        "--profile",
        tiny_profile(tmp_path),
        "--classes",
        "rewrite,chat",
        "--repeat",
        1,
        "--ks",
        "0,2",
        "--max-new-tokens",
        12,
        "--json",
        out,
        "--log",
        log,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    written = json.loads(out.read_text())
    assert {"classes", "overall"} <= set(written) and set(written["classes"]) == {"rewrite", "chat"}
    for name, row in written["classes"].items():
        assert BENCH_FIELDS <= set(row), name
        assert set(row["fixed"]) == {"0", "2"} and all(v > 0 for v in row["fixed"].values()), name
        assert row["plain"] == row["fixed"]["0"]
        assert row["fixed"][str(row["best_k"])] == max(row["fixed"].values())
        assert row["auto"] > 0
        assert row["auto_over_plain"] == pytest.approx(row["auto"] / row["plain"], rel=1e-12)
        assert row["auto_over_best"] == pytest.approx(row["auto"] / max(row["fixed"].values()), rel=1e-12)
        low, high = row["auto_over_best_interval"]  # 4 prompts a class: enough for an interval
        assert low <= row["auto_over_best"] <= high and low < high
        assert f"{name} [{low:.3f}, {high:.3f}]" in done.stdout

    overall = written["overall"]
    low, high = overall["auto_over_best_interval"]  # all 8 prompts paired with the best single k's
    assert low <= overall["auto_over_best"] <= high and low < high
    assert f"auto/best single {overall['auto_over_best']:.3f} [{low:.3f}, {high:.3f}]" in done.stdout

    recomputed = {"classes": {n: c.to_json() for n, c in bench_results(read_log(log)).items()}}
    assert as_json(recomputed) == {"classes": written["classes"]}
    info = specmon("log", "info", log)
    assert "bench: goodput, tokens/s, recomputed from the log" in info.stdout
    stalls = tally(read_log(log))  # the bench's stderr and log info judge the host alike
    assert (written["disturbed_rounds"], written["measured_rounds"]) == (stalls.disturbed, stalls.measured)
    rounds = [e for e in read_log(log) if isinstance(e, RoundVerified)]
    assert stalls.measured == (len(rounds) if os.path.exists("/proc/stat") else 0)  # every round says
    assert all(e.host_stall_ms is not None and e.host_stall_ms >= 0 and 0 <= stall_share(e) <= 1 for e in rounds)
    assert ("rounds disturbed" in info.stdout) == ("rounds disturbed" in done.stderr) == (stalls.disturbed > 0)
    busy = tmp_path / "busy.specmon"  # the same log with one round held up by other work for all its 60 s
    events = list(read_log(log))
    at = next(i for i, e in enumerate(events) if isinstance(e, RoundVerified) and e.round_id == rounds[0].round_id)
    events[at] = msgspec.structs.replace(events[at], verify_ms=60_000.0, host_stall_ms=60_000.0)
    with LogWriter(busy) as writer:
        for event in events:
            writer.write(event)
    again = tally(events)
    assert again.disturbed == stalls.disturbed + (not disturbed(rounds[0])) and again.peak == pytest.approx(
        1.0, abs=1e-3
    )
    assert re.sub(r"\s+", " ", again.said()) in re.sub(r"\s+", " ", specmon("log", "info", busy).stdout)

    if any(isinstance(e, Decision) for e in read_log(log)):
        explain = specmon("policy", "explain", log)
        assert explain.returncode == 0, explain.stdout
        assert re.search(r"(\d+) of \1 decisions reproduce", explain.stdout), explain.stdout


def test_a_busy_listen_port_leaves_no_log_and_no_socket(tmp_path):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    runtime = tmp_path / "run"
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    log = tmp_path / "x.specmon"
    try:
        flags = ["--classes", "rewrite", "--max-new-tokens", 4, "--listen", f"127.0.0.1:{port}", "--log", log]
        done = specmon("run", "--headless", "--profile", tiny_profile(tmp_path), *flags, env=env)
    finally:
        busy.close()
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [f"specmon: cannot listen on 127.0.0.1:{port}: Address already in use"]
    assert not log.exists()  # it would hold no event: a session that never started leaves no log
    assert list((runtime / "specmon").glob("*.sock")) == []


def serving(folder: Path, name: str, events) -> tuple[Channel, EventServer]:
    """A session that serves `events` on folder/name.sock, as `specmon run` does, without a model."""
    channel = Channel(LogSink(folder / f"{name}.specmon"))
    for ev in events:
        channel.publish(ev)
    channel.log.sync()  # the log is written on its own thread: read it only once all is there
    assert channel.log.writer.events_written == len(events)
    return channel, EventServer(channel.log, folder / f"{name}.sock")


def test_attach_lists_live_sessions_with_their_logs_and_removes_dead_sockets(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    folder = tmp_path / "specmon"
    folder.mkdir(mode=0o700)
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(folder / "dead.sock"))  # bound, never listening: what a SIGKILLed run leaves
    dead.close()
    events = [e for e in TUI_EVENTS if not isinstance(e, SessionFinished)][:40]
    channel, server = serving(folder, "live", events)
    try:
        (info,) = live_sessions()
        assert not (folder / "dead.sock").exists()
        assert (info.socket, info.log) == (folder / "live.sock", (folder / "live.specmon").resolve())
        started = events[0]
        assert (info.session_id, info.profile, info.host) == (started.session_id, "smollm2-cpu", "vm")
        assert info.rounds == sum(isinstance(e, RoundVerified) for e in events) and info.ended is None
    finally:
        server.close()
        channel.close()
    assert live_sessions() == [] and not (folder / "live.log").exists()


def test_attach_with_several_sessions_lists_them_and_asks_for_one(tmp_path):
    folder = tmp_path / "specmon"
    folder.mkdir(mode=0o700)
    started = [e for e in TUI_EVENTS if not isinstance(e, SessionFinished)][:10]
    running = [serving(folder, name, started) for name in ("a", "b")]
    rounds = sum(isinstance(e, RoundVerified) for e in started)
    try:
        done = specmon("attach", "--headless", env={**os.environ, "XDG_RUNTIME_DIR": str(tmp_path)}, timeout=60)
    finally:
        for channel, server in running:
            server.close()
            channel.close()
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert lines[0] == "2 sessions are running:"
    for line, name in zip(lines[1:3], ("1.", "2.")):
        assert line.split()[:3] == [name, started[0].session_id, "smollm2-cpu@vm"] and line.endswith(
            f" {rounds} rounds"
        )
        assert len(line) <= 80, line  # a numbered item a user picks from: whole on an 80-column terminal
    assert lines[3].startswith("specmon: several sessions are running; name one: specmon attach SOCKET")


def test_attach_with_no_session_alive_names_the_newest_log_and_when_it_ended(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(FIXTURES / "session-tui.specmon", logs / "s.specmon")
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path), "SPECMON_LOGS": str(logs), "TZ": "UTC"}
    done = specmon("attach", "--headless", env=env, timeout=60)
    ended = next(e for e in TUI_EVENTS if isinstance(e, SessionFinished)).t
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert (
        f"the newest log, {logs / 's.specmon'}, ended at "
        f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(ended))} (84 rounds): specmon replay" in done.stderr
    )


def test_attach_asks_which_session_when_there_is_someone_to_ask(tmp_path, monkeypatch, capsys):
    from specmon.cli import inspect

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    folder = tmp_path / "specmon"
    folder.mkdir(mode=0o700)
    started = [e for e in TUI_EVENTS if not isinstance(e, SessionFinished)][:10]
    running = [serving(folder, name, started) for name in ("a", "b")]
    os.utime(folder / "a.sock", (1, 1))  # b is the newer: listed first
    asked = []
    try:
        monkeypatch.setattr("builtins.input", lambda prompt: asked.append(prompt) or "2")
        assert inspect.pick_session(ask=True) == str(folder / "a.sock")
        monkeypatch.setattr("builtins.input", lambda prompt: "")
        assert inspect.pick_session(ask=True) == str(folder / "b.sock")  # Enter takes the newest
        monkeypatch.setattr("builtins.input", lambda prompt: "3")
        with pytest.raises(Exception, match="'3' is not one of 1..2"):
            inspect.pick_session(ask=True)
    finally:
        for channel, server in running:
            server.close()
            channel.close()
    assert asked == ["attach to which? [1-2, Enter for 1] "]


def test_attach_with_no_session_keeps_the_logs_round_count_and_command_whole(monkeypatch, capsys):
    """At 80 columns the trial's message split `(1078` / `rounds): specmon replay ...`."""
    import calendar
    from types import SimpleNamespace

    from specmon.cli import inspect
    from specmon.cli.main import main

    log = Path("logs/20261206-033031-c76629.specmon")
    ended = calendar.timegm(time.strptime("2026-12-06 03:32:29", "%Y-%m-%d %H:%M:%S"))
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(inspect, "live_sessions", lambda: [])
    monkeypatch.setattr(inspect, "runtime_dir", lambda: Path("/tmp/specmon-0"))
    monkeypatch.setattr(inspect, "newest_log", lambda folder: log)
    monkeypatch.setattr(inspect, "describe", lambda path: SimpleNamespace(ended=ended, rounds=1078))
    try:
        assert main(["attach", "--headless"]) == 2
    finally:
        monkeypatch.undo()
        time.tzset()
    lines = capsys.readouterr().err.splitlines()
    assert any("(1078 rounds)" in line for line in lines), lines  # once `(1078` / `rounds): ...`
    assert any("2026-12-06 03:32:29" in line for line in lines), lines
    assert any(line.strip() == f"specmon replay {log}" or line.endswith(f": specmon replay {log}") for line in lines)
    assert all(len(line) <= 80 for line in lines)
