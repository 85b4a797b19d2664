"""Crash safety, damaged-log properties, live fan-out and attach over real sockets."""

import bisect
import itertools
import os
import random
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import example, given, settings, strategies as st

from specmon.errors import SpecmonError
from specmon.transport.attach import attach_events
from specmon.transport.channel import Channel, LogSink
from specmon.events.frames import FrameDecoder, LogDamaged
from specmon.events.log import follow_log, read_log
from specmon.events.schema import RoundVerified, SessionFinished
from specmon.transport.serve import EventServer, parse_listen
from tinymodel import tiny_profile
from waiting import wait_until
from events import frame, preamble, round_verified

SPECMON = [sys.executable, "-m", "specmon.cli"]


def rnd(i: int) -> RoundVerified:
    return round_verified(
        t=float(i),
        round_id=i,
        prompt_id=f"p{i // 7}",
        prompt_class="c",
        round_index=i % 7,
        draft_len=3,
        proposed=[i, i + 1, i + 2][: i % 4],
        accepted=min(i % 3, i % 4),
        emitted=[i] * (1 + min(i % 3, i % 4)),
        draft_ms=0.1,
        verify_ms=4.0,
        overhead_ms=0.2,
        target_probs=[0.5] * (i % 4),
        margins=[1.0],
        mem_bytes=i,
    )


WRITTEN = [rnd(i) for i in range(40)]
LOG_BYTES = preamble() + b"".join(frame(e) for e in WRITTEN)


def decode_all(data: bytes, chunk: int):
    """Feed in chunks; return (events, error) the way every reader sees them."""
    decoder, got = FrameDecoder("t"), []
    try:
        for start in range(0, len(data), chunk):
            got.extend(decoder.feed(data[start : start + chunk]))
        decoder.finish()
    except SpecmonError as exc:  # LogDamaged, or not a log at all
        return got, exc
    return got, None


# Where each frame starts in LOG_BYTES; the last entry is the end of the log.
FRAME_STARTS = list(itertools.accumulate((len(frame(e)) for e in WRITTEN), initial=len(preamble())))


@settings(max_examples=300, deadline=None)
@given(cut=st.integers(0, len(LOG_BYTES)) | st.sampled_from(FRAME_STARTS), chunk=st.integers(1, 4096))
@example(cut=0, chunk=1)
@example(cut=len(preamble()) - 1, chunk=3)
@example(cut=len(preamble()), chunk=7)
@example(cut=FRAME_STARTS[1] - 1, chunk=4096)
@example(cut=FRAME_STARTS[20] + 1, chunk=1)
@example(cut=len(LOG_BYTES) - 1, chunk=64)
@example(cut=len(LOG_BYTES), chunk=5)
def test_random_truncation_yields_a_prefix_and_names_the_offset(cut, chunk):
    got, error = decode_all(LOG_BYTES[:cut], chunk)
    if cut < len(preamble()):  # not even the header: not a log at all, rather than a damaged one
        assert got == [] and type(error) is SpecmonError and "not a specmon session log" in str(error)
        return
    whole = bisect.bisect_right(FRAME_STARTS, cut) - 1  # frames that end at or before the cut
    assert got == WRITTEN[:whole]
    if cut == FRAME_STARTS[whole]:  # cut between frames: nothing to tell it from a shorter log
        assert error is None
    else:
        assert isinstance(error, LogDamaged) and "truncated" in error.reason
        assert error.offset == FRAME_STARTS[whole]  # where the partial frame began, not where the bytes stop
        assert f"damaged at byte {FRAME_STARTS[whole]}:" in str(error)


@settings(max_examples=300, deadline=None)
@given(
    flips=st.lists(st.tuples(st.integers(0, len(LOG_BYTES) - 1), st.integers(0, 7)), min_size=1, max_size=4),
    chunk=st.integers(1, 4096),
)
def test_random_bit_flips_never_yield_an_event_that_was_not_written(flips, chunk):
    data = bytearray(LOG_BYTES)
    for index, bit in flips:
        data[index] ^= 1 << bit
    got, error = decode_all(bytes(data), chunk)
    assert got == WRITTEN[: len(got)]
    assert error is not None or got == WRITTEN  # a flip is either caught or (flipped twice) undone


@settings(max_examples=200, deadline=None)
@given(garbage=st.binary(min_size=1, max_size=300), chunk=st.integers(1, 4096))
def test_garbage_appended_keeps_every_event_and_reports_where(garbage, chunk):
    got, error = decode_all(LOG_BYTES + garbage, chunk)
    assert got[: len(WRITTEN)] == WRITTEN and len(got) == len(WRITTEN)
    assert isinstance(error, LogDamaged) and error.offset == len(LOG_BYTES)


def test_viewer_buffers_skip_visibly_while_the_log_keeps_everything(tmp_path):
    sink = LogSink(tmp_path / "s.specmon")
    channel = Channel(sink)
    slow, fast = channel.subscribe(maxlen=10), channel.subscribe(maxlen=1000)
    for event in WRITTEN:
        channel.publish(event)
    channel.close()
    assert list(read_log(sink.path)) == WRITTEN
    assert fast.drain() == WRITTEN and fast.skipped == 0
    assert slow.drain() == WRITTEN[-10:] and slow.skipped == 30


def test_follow_reads_a_log_while_it_is_written(tmp_path):
    sink = LogSink(tmp_path / "s.specmon")
    channel = Channel(sink)
    got = []

    def read() -> None:
        for event in follow_log(sink.path, poll_s=0.01, idle_timeout_s=10):
            got.append(event)  # one at a time, as they come

    reader = threading.Thread(target=read)
    channel.publish(WRITTEN[0])
    sink.sync()  # on disk before the reader opens the log
    reader.start()
    for i, event in enumerate(WRITTEN[1:], start=1):
        wait_until(lambda: len(got) == i, f"the reader has the {i} events written so far")  # then write one more
        channel.publish(event)
    channel.publish(SessionFinished(session_id="s", t=0.0, rounds=40, reason="done"))
    channel.close()
    reader.join(timeout=10)
    assert got[:-1] == WRITTEN and isinstance(got[-1], SessionFinished)


def _published_session(tmp_path, listen=None):
    sink = LogSink(tmp_path / "s.specmon")
    return sink, Channel(sink), EventServer(sink, tmp_path / "s.sock", listen)


def test_two_unix_clients_and_a_tcp_client_see_exactly_the_log(tmp_path):
    sink, channel, server = _published_session(tmp_path, parse_listen("127.0.0.1:0"))
    host, port = server.tcp_address
    assert oct(os.stat(server.unix_path).st_mode & 0o777) == "0o600"
    for event in WRITTEN[:15]:  # history before anyone attaches
        channel.publish(event)
    results: dict[str, list] = {name: [] for name in ("unix-1", "unix-2", "tcp")}
    clients = {
        "unix-1": (str(server.unix_path), None),
        "unix-2": (str(server.unix_path), None),
        "tcp": (f"{host}:{port}", server.token),
    }

    def attach(name: str, target: str, token: str | None) -> None:
        for event in attach_events(target, token):
            results[name].append(event)  # one at a time, as they come

    threads = [threading.Thread(target=attach, args=(name, *target)) for name, target in clients.items()]
    for thread in threads:
        thread.start()
    wrong = socket.create_connection((host, port))
    wrong.sendall(b"not-the-token\n")
    wait_until(lambda: all(len(got) == 15 for got in results.values()), "every client attached, the history sent")
    for event in WRITTEN[15:]:  # live: to clients already attached
        channel.publish(event)
    channel.publish(SessionFinished(session_id="s", t=0.0, rounds=40, reason="done"))
    channel.close()
    for thread in threads:
        thread.join(timeout=20)
    logged = list(read_log(sink.path))
    assert len(logged) == 41
    for name in clients:
        assert results[name] == logged, name
    wrong.settimeout(5)
    assert wrong.recv(1024) == b""  # closed, and not one byte of the session sent
    server.close()


def test_the_tcp_token_counts_only_as_a_whole_line(tmp_path):
    sink, channel, server = _published_session(tmp_path, parse_listen("127.0.0.1:0"))
    channel.publish(WRITTEN[0])
    cut = socket.create_connection(server.tcp_address)
    cut.sendall(server.token.encode())  # the right token, but its line never ends
    cut.shutdown(socket.SHUT_WR)
    cut.settimeout(5)
    assert cut.recv(1024) == b""  # closed, and not one byte of the session sent
    whole = socket.create_connection(server.tcp_address)
    whole.sendall(server.token.encode() + b"\n")
    whole.settimeout(5)
    assert whole.recv(1024) != b""  # the same token, as a line: the session comes
    for conn in (cut, whole):
        conn.close()
    channel.close()
    server.close()


def test_a_client_that_disconnects_does_not_disturb_the_run(tmp_path):
    sink, channel, server = _published_session(tmp_path)
    quitter = socket.socket(socket.AF_UNIX)
    quitter.connect(str(server.unix_path))
    channel.publish(WRITTEN[0])
    quitter.close()
    for event in WRITTEN[1:]:
        channel.publish(event)
    channel.close()
    server.close()
    assert list(read_log(sink.path)) == WRITTEN


def test_listen_refuses_non_loopback_addresses():
    with pytest.raises(SpecmonError, match="only loopback"):
        parse_listen("0.0.0.0:7000")


@pytest.mark.slow
def test_sigkill_at_random_moments_loses_at_most_the_frame_being_written(tmp_path):
    profile = tiny_profile(tmp_path, max_new_tokens=400)
    rng = random.Random(1234)
    lost_partial = 0
    for attempt in range(20):
        log = tmp_path / f"kill-{attempt}.specmon"
        proc = subprocess.Popen(
            [*SPECMON, "run", "--headless", "--profile", str(profile), "--log", str(log)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=_env(),
        )
        min_bytes = rng.randint(200, 60_000)  # the random moment: the log's size when the kill comes
        wait_until(lambda: log.exists() and log.stat().st_size >= min_bytes, f"{log} reaches {min_bytes} bytes")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        events, error = [], None
        try:
            events.extend(read_log(log))
        except LogDamaged as exc:
            error = exc
        rounds = [e for e in events if isinstance(e, RoundVerified)]
        assert rounds, "the kill came after rounds were written"
        assert [r.round_id for r in rounds] == list(range(len(rounds)))  # nothing missing in between
        if error is not None:
            assert "truncated" in error.reason and log.stat().st_size - error.offset < len(frame(rounds[-1])) + 4096
            lost_partial += 1
    print(f"20 kills, {lost_partial} left a partial final frame")


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    return env


def test_session_finished_counts_the_rounds_the_log_holds_when_a_signal_splits_a_publish(tmp_path):
    """A signal may land after the log took a round but before the session's own callbacks saw it:
    SessionFinished.rounds is what the log holds, not what the callbacks counted."""
    from types import SimpleNamespace
    from specmon.transport.session import LiveSession

    sink = LogSink(tmp_path / "s.specmon")
    channel = Channel(sink)
    session = LiveSession(SimpleNamespace(session_id="s"), channel, sink, None, "s")
    channel.on_event(session.events.append)

    def signal_after_the_log_write(event):
        if isinstance(event, RoundVerified) and event.round_id == 6:
            raise KeyboardInterrupt  # where a SIGTERM's handler raises in the main thread

    channel._callbacks.insert(0, signal_after_the_log_write)
    with pytest.raises(KeyboardInterrupt):
        for event in WRITTEN:
            channel.publish(event)
    session.finish("interrupted")
    channel.close()
    logged = list(read_log(sink.path))
    assert sum(isinstance(e, RoundVerified) for e in session.events) == 6  # round 6 never reached the session
    assert logged[-1] == session.finished and session.finished.rounds == 7 == sum(
        isinstance(e, RoundVerified) for e in logged
    )
