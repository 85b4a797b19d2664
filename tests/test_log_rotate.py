"""Log rotation (issue 58, point 2): a long-running session's log goes on in new parts without losing or
repeating an event, and `attach`, `replay` and `log info` work on every part and across them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import msgspec
import pytest

from events import request_timed, session_started
from specmon.errors import SpecmonError
from specmon.events.log import Rotation, follow_log, read_log
from specmon.events.parts import part_path
from specmon.events.schema import LogRotated, RequestTimed, SessionFinished, SessionStarted, decode, encode
from specmon.transport.attach import attach_events
from specmon.transport.channel import Channel, LogSink
from specmon.transport.serve import EventServer
from specmon.transport.session import observed_header, observer_session
from waiting import wait_until

REPO = Path(__file__).resolve().parent.parent
THREADS, EACH = 4, 400


def header(session_id: str = "s") -> SessionStarted:
    return session_started(
        session_id=session_id,
        t=1.0,
        profile_name="proxy",
        backend="proxy",
        target="http://u",
        drafter="llama-server",
        dtype="",
        device="",
    )


def rotating_sink(path: Path, max_bytes: int | None = 4000, keep: int | None = None) -> tuple[LogSink, list]:
    """A sink that rotates past `max_bytes`, and the payloads in the order the log takes them (offer's order)."""
    sink = LogSink(path)
    sink.writer.rotation = Rotation(max_bytes=max_bytes, keep=keep)
    offered, lock, offer = [], threading.Lock(), sink.offer

    def recorded(payload: bytes, is_round: bool = False) -> None:
        with lock:
            offered.append(payload)
            offer(payload, is_round)

    sink.offer = recorded
    return sink, offered


def publish_from_threads(channel: Channel) -> None:
    def publish(thread: int) -> None:
        for i in range(EACH):
            channel.publish(request_timed(request_id=f"{thread}-{i}", predicted_n=i))

    threads = [threading.Thread(target=publish, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    channel.publish(SessionFinished(session_id="s", t=2.0, rounds=0, reason="done"))


def parts_of(live: Path, sink: LogSink) -> list[Path]:
    finished = (part_path(live, n) for n in range(1, sink.writer.part))
    return [*(path for path in finished if path.exists()), live]


def joined(parts: list[Path]) -> list:
    """Every part's events, end to end, without the markers and the headers that open later parts."""
    events = []
    for n, part in enumerate(parts, start=1):
        got = list(read_log(part))
        assert isinstance(got[0], SessionStarted) and got[0].part == n
        events += got[1:] if n > 1 else got
    return [ev for ev in events if not isinstance(ev, LogRotated)]


def test_events_from_several_threads_across_many_rotations_are_each_in_the_log_once_in_order(tmp_path):
    live = tmp_path / "S.specmon"
    sink, offered = rotating_sink(live)
    channel = Channel(sink)
    channel.publish(header())
    sink.sync()
    followed: list = []
    follower = threading.Thread(target=lambda: followed.extend(follow_log(live, poll_s=0.001, idle_timeout_s=None)))
    follower.start()  # `attach LOG` from the first part, while the session runs and rotates
    publish_from_threads(channel)
    channel.close()
    follower.join(timeout=60)
    published = [decode(p) for p in offered]
    parts = parts_of(live, sink)
    assert len(published) == 1 + THREADS * EACH + 1 and len(parts) == sink.writer.part >= 20
    assert joined(parts) == published
    assert followed == published  # the follower crossed every rotation: nothing skipped, nothing twice
    for n, part in enumerate(parts[:-1], start=1):
        last = list(read_log(part))[-1]
        assert last == LogRotated(session_id="s", t=last.t, part=n, next_name="S.specmon", next_log_id=last.next_log_id)
    assert list(follow_log(parts[0], idle_timeout_s=0.0)) == published  # after the fact, from part 1 too


def test_attach_over_the_socket_follows_the_session_across_rotations(tmp_path):
    live = tmp_path / "S.specmon"
    sink, offered = rotating_sink(live)
    channel = Channel(sink)
    server = EventServer(sink, tmp_path / "s.sock")
    channel.publish(header())
    sink.sync()
    attached: list = []
    client = threading.Thread(target=lambda: attached.extend(attach_events(str(server.unix_path))))
    client.start()
    wait_until(lambda: len(attached) == 1, "the client attached and has the header")
    publish_from_threads(channel)
    channel.close()
    client.join(timeout=60)
    server.close()
    assert sink.writer.part >= 20 and attached == [decode(p) for p in offered]


def test_every_part_reads_alone_and_log_info_names_the_parts_around_it(tmp_path):
    live = tmp_path / "S.specmon"
    sink, offered = rotating_sink(live, max_bytes=None)
    channel = Channel(sink)
    channel.publish(header())
    for part in range(3):
        for i in range(5):
            channel.publish(request_timed(request_id=f"{part}-{i}"))
        sink.sync()
        if part < 2:
            sink.writer.rotate_soon()  # what SIGUSR1 does: the next batch ends the part
    channel.publish(SessionFinished(session_id="s", t=2.0, rounds=0, reason="done"))
    channel.close()
    parts = parts_of(live, sink)
    assert [p.name for p in parts] == ["S.1.specmon", "S.2.specmon", "S.specmon"]
    assert joined(parts) == [decode(p) for p in offered]
    first = log_info(parts[0])
    assert first.returncode == 0 and "integrity        ok" in first.stdout
    assert "continued        in part 2: S.specmon while it is live, then S.2.specmon" in first.stdout
    assert "no end written" not in first.stdout  # a finished part is not a killed session
    newest = log_info(live)
    assert newest.returncode == 0 and "RequestTimed" in newest.stdout
    assert "part             3 of a rotated log; earlier parts here: S.1.specmon, S.2.specmon" in newest.stdout


def log_info(log: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "specmon.cli", "log", "info", str(log)], capture_output=True, text=True, env=env
    )


def test_keep_removes_the_oldest_parts_and_log_info_says_so(tmp_path):
    live = tmp_path / "S.specmon"
    sink, offered = rotating_sink(live, keep=2)
    channel = Channel(sink)
    channel.publish(header())
    publish_from_threads(channel)
    channel.close()
    last = sink.writer.part
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"S.{last - 2}.specmon", f"S.{last - 1}.specmon", "S.specmon"]
    )
    assert (
        f"earlier parts here: S.{last - 2}.specmon, S.{last - 1}.specmon ({last - 3} removed)" in log_info(live).stdout
    )


CRASHING_WRITER = """
import os, sys
sys.path.insert(0, "tests")
from events import request_timed
from test_log_rotate import header
from specmon.events.log import LogWriter, Rotation
step, nth = sys.argv[2], int(sys.argv[3])
calls = {"link": 0, "rename": 0}
real = {"link": os.link, "rename": os.rename}

def crashing(name):
    def call(*args):
        calls[name] += 1
        if name == step and calls[name] == nth:
            os._exit(9)  # the process dies here: no cleanup, no close
        if name == "link" and no_links:
            raise PermissionError(1, "no hard links on this filesystem")
        return real[name](*args)
    return call

os.link, os.rename = crashing("link"), crashing("rename")
no_links = step.endswith("-without-links")
step = step.removesuffix("-without-links")
writer = LogWriter(sys.argv[1])
writer.rotation = Rotation()  # as the session sets it
writer.write(header())
for i in range(30):
    writer.write(request_timed(request_id=str(i)))
writer.rotate()
"""


@pytest.mark.parametrize(
    "step, nth",
    [("link", 1), ("rename", 1), ("rename-without-links", 1), ("rename-without-links", 2)],
    ids=["before-link", "after-marker", "no-links-before-renames", "no-links-between-renames"],
)
def test_a_crash_at_any_step_of_a_rotation_loses_no_written_event(tmp_path, step, nth):
    live = tmp_path / "S.specmon"
    done = subprocess.run([sys.executable, "-c", CRASHING_WRITER, str(live), step, str(nth)], cwd=REPO)
    assert done.returncode == 9
    finished = live.with_name("S.1.specmon")
    holder = finished if finished.exists() else live  # the live name, or the one it got before the crash
    events = [ev for ev in read_log(holder) if not isinstance(ev, LogRotated)]
    assert events == [header(), *(request_timed(request_id=str(i)) for i in range(30))]
    got: list = []
    with pytest.raises(SpecmonError):  # the session was killed: said once, after every event it wrote
        got.extend(follow_log(holder, poll_s=0.001, idle_timeout_s=0.05))
    assert got == events


def test_sigusr1_rotates_a_running_session_and_its_handler_goes_back_after(tmp_path):
    live = tmp_path / "S.specmon"
    before = signal.getsignal(signal.SIGUSR1)
    with observer_session(
        lambda sid: observed_header(sid, "proxy", "http://u", "llama-server"),
        live,
        serve=False,
        announce=False,
        rotation=Rotation(),
    ) as session:
        for i in range(5):
            session.channel.publish(request_timed(request_id=str(i)))
        os.kill(os.getpid(), signal.SIGUSR1)
        for i in range(5, 10):
            session.channel.publish(request_timed(request_id=str(i)))
    assert signal.getsignal(signal.SIGUSR1) == before
    parts = [live.with_name("S.1.specmon"), live]
    assert all(p.exists() for p in parts) and not live.with_name("S.2.specmon").exists()
    events = joined(parts)
    assert [ev.request_id for ev in events[1:-1]] == [str(i) for i in range(10)]
    assert isinstance(events[-1], SessionFinished)


def test_sigusr1_on_an_idle_session_rotates_at_once_not_at_its_next_event(tmp_path):
    """An operator's script moves the finished part away after the signal: it must not wait for traffic."""
    live = tmp_path / "S.specmon"
    header = lambda sid: observed_header(sid, "proxy", "http://u", "llama-server")  # noqa: E731
    with observer_session(header, live, serve=False, announce=False, rotation=Rotation()) as session:
        session.channel.publish(request_timed(request_id="0"))
        session.sink.sync()
        os.kill(os.getpid(), signal.SIGUSR1)
        wait_until(lambda: live.with_name("S.1.specmon").exists(), "the part finished with no event after the signal")
        session.channel.publish(request_timed(request_id="1"))
    first = [ev.request_id for ev in read_log(live.with_name("S.1.specmon")) if isinstance(ev, RequestTimed)]
    assert first == ["0"]
    assert [ev.request_id for ev in read_log(live) if isinstance(ev, RequestTimed)] == ["1"]


def test_a_rotating_session_refuses_a_log_whose_later_part_is_left_from_an_older_one(tmp_path):
    """--log-keep removed an old log's first parts, not its later ones: a new log under its name would
    collide with them at its third rotation."""
    live = tmp_path / "S.specmon"
    live.with_name("S.3.specmon").write_bytes(b"")
    header = lambda sid: observed_header(sid, "proxy", "http://u", "llama-server")  # noqa: E731
    with pytest.raises(SpecmonError, match="S.3.specmon exists"):
        with observer_session(header, live, serve=False, announce=False, rotation=Rotation()):
            pass
    assert not live.exists()


def test_a_rotating_session_refuses_a_log_whose_first_part_name_is_taken(tmp_path):
    live = tmp_path / "S.specmon"
    live.with_name("S.1.specmon").write_bytes(b"another session's part")
    with pytest.raises(SpecmonError, match="S.1.specmon exists"):
        with observer_session(lambda sid: header(sid), live, serve=False, announce=False, rotation=Rotation()):
            pass
    assert not live.exists()


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--log-max-mb", "0"], "argument --log-max-mb: must be a size in MB > 0 (or off), not 0"),
        (["--log-max-mb", "-5"], "argument --log-max-mb: must be a size in MB > 0 (or off), not -5"),
        (["--log-max-mb", "big"], "argument --log-max-mb: expected a size in MB or off, not 'big'"),
        (["--log-keep", "-1"], "argument --log-keep: must be >= 0 (0: keep only the live part), not -1"),
    ],
)
@pytest.mark.parametrize("command", [["proxy", "--upstream", "http://127.0.0.1:9"], ["watch", "http://x"], ["serve"]])
def test_a_bad_rotation_flag_is_one_line(command, flags, said):
    done = subprocess.run(
        [sys.executable, "-m", "specmon.cli", *command, *flags], capture_output=True, text=True, cwd=REPO
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [f"specmon: {said} (see `specmon {command[0]} --help`)"]


def test_rotation_events_round_trip_and_older_headers_read_as_part_one():
    marker = LogRotated(session_id="s", t=1.0, part=3, next_name="S.specmon", next_log_id="00" * 8)
    assert decode(encode(marker)) == marker
    fields = msgspec.msgpack.decode(encode(header()))
    older = msgspec.msgpack.encode(fields[:-1])  # a header as a specmon before `part` wrote it: one field fewer
    assert fields[-1] == 1 and decode(older) == header()
