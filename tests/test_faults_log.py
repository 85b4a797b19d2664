"""Fault tier, session logs: a log is never appended to, frames out of order are damage, a killed
session's log is not followed forever, and damaged logs (fuzzed) never crash a reader, never
yield an invented event and always yield every event before the damage.

Run the whole fuzz and print its table:  pytest -s -p no:cacheprovider tests/test_faults_log.py -k fuzz
"""

import bisect
import collections
import os
import signal
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from specmon.errors import SpecmonError
from specmon.events import log as events_log
from specmon.events.frames import FrameDecoder, LogDamaged
from specmon.events.log import LogWriter, follow_log, read_log
from specmon.events.schema import SessionFinished
from specmon.transport.channel import Channel, LogSink
from tinymodel import tiny_profile
from waiting import wait_until

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
TUI_EVENTS = list(read_log(FIXTURES / "session-tui.specmon"))  # 101 events, SessionFinished last
POLICY_EVENTS = list(read_log(FIXTURES / "session-policy.specmon"))[:200]  # another session
PREAMBLE_SIZE = 10  # magic, version: the same in every format


def written(events) -> bytes:
    """The bytes LogWriter writes for `events` (a fresh log id each time)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.specmon"
        with LogWriter(path) as log:
            for event in events:
                log.write(event)
        return path.read_bytes()


def frame_starts(data: bytes) -> list[int]:
    """Where each frame of an undamaged log starts; the last entry is the end of the log."""
    version = struct.unpack_from(">H", data, 8)[0]
    header, at = (12, PREAMBLE_SIZE + 8) if version >= 2 else (8, PREAMBLE_SIZE)
    starts = [at]
    while at < len(data):
        at += header + struct.unpack_from(">I", data, at)[0]
        starts.append(at)
    assert at == len(data)
    return starts


def outcome(data: bytes, tmp: Path, chunk: int = 1 << 16):
    """(events, error) as read_log sees `data`; a FrameDecoder fed in `chunk`s must agree."""
    path = tmp / "d.specmon"
    path.write_bytes(data)
    got, error = [], None
    try:
        got.extend(read_log(path))
    except SpecmonError as exc:  # LogDamaged, or not a log at all; anything else is a crash
        error = exc
    decoder, streamed, streamed_error = FrameDecoder(str(path)), [], None
    try:
        for start in range(0, len(data), chunk):
            streamed.extend(decoder.feed(data[start : start + chunk]))
        decoder.finish()
    except SpecmonError as exc:
        streamed_error = exc
    assert streamed == got and str(streamed_error) == str(error)
    return got, error


# -- #2: --log never appends ---------------------------------------------------------------------


def _cut_log(path: Path) -> None:
    path.write_bytes(written(TUI_EVENTS[:30])[:-5])  # what a crash leaves: the last frame cut


EXISTING = {
    "a whole log": lambda p: p.write_bytes(written(TUI_EVENTS)),
    "a log whose tail was cut": _cut_log,
    "a text file": lambda p: p.write_text("my notes\n"),
    "an empty file": lambda p: p.write_bytes(b""),  # refused too: specmon never writes into a file it did not create
}


@pytest.mark.parametrize("kind", EXISTING)
def test_a_log_writer_refuses_an_existing_file_and_leaves_it_untouched(tmp_path, kind):
    path = tmp_path / "existing.specmon"
    EXISTING[kind](path)
    before = path.read_bytes()
    with pytest.raises(SpecmonError) as refused:
        LogWriter(path)
    assert str(refused.value) == f"{path} exists; pick a new file or remove it"
    assert path.read_bytes() == before
    with pytest.raises(SpecmonError) as refused_sink:  # what live_session opens: raised before its thread starts
        LogSink(path)
    assert str(refused_sink.value) == str(refused.value) and path.read_bytes() == before


def test_writers_racing_for_one_path_get_one_log(tmp_path):
    """O_EXCL: of writers opening the same new path at once, exactly one wins; nothing is interleaved."""
    path = tmp_path / "race.specmon"
    barrier, wins, refusals = threading.Barrier(8), [], []

    def contend() -> None:
        barrier.wait()
        try:
            wins.append(LogWriter(path))
        except SpecmonError as exc:
            refusals.append(str(exc))

    threads = [threading.Thread(target=contend) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(wins) == 1 and refusals == [f"{path} exists; pick a new file or remove it"] * 7
    with wins[0] as log:
        for event in TUI_EVENTS:
            log.write(event)
    assert list(read_log(path)) == TUI_EVENTS


@pytest.mark.parametrize("existing", ["notes.txt", "old.specmon"])
def test_run_with_an_existing_log_is_one_line_and_writes_nothing(tmp_path, existing):
    profile = tiny_profile(tmp_path, max_new_tokens=4)
    log = tmp_path / existing
    log.write_bytes(b"my notes\n" if existing.endswith(".txt") else written(TUI_EVENTS)[:-5])
    before = log.read_bytes()
    runtime = tmp_path / "runtime"
    done = subprocess.run(
        [sys.executable, "-m", "specmon.cli", "run", "--headless", "--profile", str(profile), "--log", str(log)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
    )
    assert done.returncode != 0, done.stderr
    assert done.stderr.strip().splitlines() == [f"specmon: {log} exists; pick a new file or remove it"], done.stderr
    assert log.read_bytes() == before
    assert not list(runtime.rglob("*.sock"))  # nothing served either


# -- #9: frames out of order are damage ------------------------------------------------------------


def test_the_writer_numbers_frames_from_zero_in_format_2(tmp_path):
    data = written(TUI_EVENTS[:20])
    assert data[:8] == b"SPECMON\x00" and struct.unpack_from(">H", data, 8)[0] == 2
    starts = frame_starts(data)
    assert [struct.unpack_from(">I", data, at + 4)[0] for at in starts[:-1]] == list(range(20))


def _frames(data: bytes) -> tuple[bytes, list[bytes]]:
    starts = frame_starts(data)
    return data[: starts[0]], [data[a:b] for a, b in zip(starts, starts[1:])]


@pytest.mark.parametrize(
    "change, whole, reason",
    [
        (lambda f: f[:11] + [f[10]] + f[11:], 11, "frame 10 where frame 11 belongs"),  # duplicated
        (lambda f: f[:10] + [f[11], f[10]] + f[12:], 10, "frame 11 where frame 10 belongs"),  # swapped
        (lambda f: f[:10] + f[11:], 10, "frame 11 where frame 10 belongs"),  # missing
        (lambda f: f + [f[-1]], 101, "frame 100 where frame 101 belongs"),  # a repeated last frame
    ],
    ids=["duplicated", "swapped", "missing", "last repeated"],
)
def test_a_duplicated_reordered_or_missing_frame_is_damage_at_its_offset(tmp_path, change, whole, reason):
    head, frames = _frames(written(TUI_EVENTS))
    damaged = change(frames)
    got, error = outcome(head + b"".join(damaged), tmp_path, chunk=97)
    assert got == TUI_EVENTS[:whole]
    assert isinstance(error, LogDamaged) and reason in error.reason and "duplicated, reordered" in error.reason
    assert error.offset == len(head) + sum(map(len, damaged[:whole]))


def test_a_frame_spliced_in_from_another_log_is_damage_even_with_the_right_number(tmp_path):
    """Same position, same sequence number, a valid frame of another session: the log id catches it."""
    head, frames = _frames(written(TUI_EVENTS))
    _, foreign = _frames(written(POLICY_EVENTS))
    got, error = outcome(head + b"".join(frames[:5] + [foreign[5]] + frames[6:]), tmp_path)
    assert got == TUI_EVENTS[:5]
    assert isinstance(error, LogDamaged) and "checksum" in error.reason
    assert error.offset == len(head) + sum(map(len, frames[:5]))


def test_log_info_no_longer_calls_a_duplicated_frame_intact(tmp_path):
    head, frames = _frames(written(TUI_EVENTS))
    path = tmp_path / "dup.specmon"
    path.write_bytes(head + b"".join(frames[:40] + [frames[39]] + frames[40:]))
    done = subprocess.run(
        [sys.executable, "-m", "specmon.cli", "log", "info", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 1 and "integrity ok" not in done.stdout
    assert f"damaged at byte {len(head) + sum(map(len, frames[:40]))}" in done.stdout + done.stderr


def test_format_1_logs_still_read_as_before():
    """The committed format-1 fixtures read as they did; format 1 has no numbers, so its order is not checked."""
    v1 = list(read_log(FIXTURES / "session-v1.specmon"))
    assert len(v1) == 40
    assert list(read_log(FIXTURES / "session-v2.specmon")) == v1  # the same session, written as format 2
    assert len(TUI_EVENTS) == 101 and len(list(read_log(FIXTURES / "session-policy.specmon"))) == 568
    raw = (FIXTURES / "session-v1.specmon").read_bytes()
    starts = frame_starts(raw)
    assert struct.unpack_from(">H", raw, 8)[0] == 1
    doubled = raw[: starts[3]] + raw[starts[2] : starts[3]] + raw[starts[3] :]
    assert len(list(FrameDecoder("v1").feed(doubled))) == 41  # as before: accepted


def test_a_live_channel_writes_numbered_frames_that_every_reader_reads(tmp_path):
    sink = LogSink(tmp_path / "live.specmon")
    channel = Channel(sink)
    for event in TUI_EVENTS:
        channel.publish(event)
    channel.close()
    data = sink.path.read_bytes()
    starts = frame_starts(data)
    assert [struct.unpack_from(">I", data, at + 4)[0] for at in starts[:-1]] == list(range(len(TUI_EVENTS)))
    assert outcome(data, tmp_path, chunk=1)[0] == TUI_EVENTS  # a socket may deliver byte by byte


# -- #8: following a killed session's log ends -----------------------------------------------------

WRITER = """
import sys
from specmon.events.log import LogWriter, read_log
events = list(read_log(sys.argv[2]))
first, rest = int(sys.argv[3]), int(sys.argv[4])
with LogWriter(sys.argv[1]) as log:
    for event in events[:first]:
        log.write(event)
    print("written", flush=True)
    sys.stdin.readline()  # a slow round, until the test ends it: the session is alive, its log does not grow
    for event in events[first:first + rest]:
        log.write(event)
    print("written", flush=True)
    sys.stdin.read()  # until killed, unless the last event was SessionFinished
"""


def _writer(log: Path, first: int, rest: int) -> subprocess.Popen:
    """A session that writes `first` events, then is in a round until a line comes on its stdin."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(log), str(FIXTURES / "session-tui.specmon"), str(first), str(rest)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert proc.stdout.readline() == "written\n"
    return proc


def _liveness_looks(monkeypatch) -> list[bool]:
    """follow_log's looks, as they come, at whether its log's writer lives (one per idle timeout without growth)."""
    looks: list[bool] = []
    look = events_log._writer_alive

    def spy(fh) -> bool:
        looks.append(look(fh))
        return looks[-1]

    monkeypatch.setattr(events_log, "_writer_alive", spy)
    return looks


def _follow(log: Path, idle_timeout_s: float) -> tuple[list, list, threading.Thread]:
    got, errors = [], []

    def run() -> None:
        try:
            got.extend(follow_log(log, poll_s=0.01, idle_timeout_s=idle_timeout_s))
        except SpecmonError as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return got, errors, thread


def test_following_a_killed_sessions_log_ends_with_one_clear_error(tmp_path, monkeypatch):
    log = tmp_path / "killed.specmon"
    looks = _liveness_looks(monkeypatch)
    proc = _writer(log, first=50, rest=0)
    got, errors, follower = _follow(log, idle_timeout_s=0.3)
    wait_until(lambda: looks.count(True) >= 2, "the follower, idle past its timeout twice, finding the session alive")
    assert follower.is_alive() and got == TUI_EVENTS[:50]  # the session is alive, so the follower waits
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    follower.join(timeout=10)
    assert not follower.is_alive(), "follow_log still waits on a killed session's log"
    assert looks[-1] is False and looks.count(False) == 1  # it ended at its first look that found the writer gone
    assert got == TUI_EVENTS[:50] and len(errors) == 1 and type(errors[0]) is SpecmonError
    assert str(errors[0]) == (
        f"{log} has not grown for 0.3 s and has no SessionFinished: its session was killed or "
        f"hung; `specmon log info {log}` shows what it holds"
    )


def test_following_a_slow_live_session_waits_for_it_however_long(tmp_path, monkeypatch):
    """Rounds slower than the idle timeout (a big model on a policy decode): nothing is cut short."""
    log = tmp_path / "slow.specmon"
    looks = _liveness_looks(monkeypatch)
    proc = _writer(log, first=20, rest=len(TUI_EVENTS) - 20)
    try:
        got, errors, follower = _follow(log, idle_timeout_s=0.2)
        wait_until(lambda: len(looks) >= 2, "the follower idle past its timeout twice: a round slower than that")
        proc.stdin.write("\n")  # the slow round ends: the rest of the session
        proc.stdin.flush()
        follower.join(timeout=30)
        assert not follower.is_alive() and errors == []
        assert got == TUI_EVENTS and isinstance(got[-1], SessionFinished)
        assert len(looks) >= 2 and all(looks)  # each look found the session alive, so nothing was cut short
    finally:
        proc.kill()
        proc.wait()


def test_following_a_log_whose_writer_closed_without_finishing_ends(tmp_path):
    """A session whose log failed (or a writer closed early): nobody holds it, so it ends after the timeout."""
    log = tmp_path / "closed.specmon"
    with LogWriter(log) as writer:
        for event in TUI_EVENTS[:30]:
            writer.write(event)
    got, errors, follower = _follow(log, idle_timeout_s=0.2)
    follower.join(timeout=10)
    assert not follower.is_alive() and got == TUI_EVENTS[:30]
    assert len(errors) == 1 and "has no SessionFinished" in str(errors[0])


@pytest.mark.slow
def test_attach_to_a_killed_sessions_log_ends_with_one_line(tmp_path):
    """The CLI, with its default idle timeout (10 s), on the log of a real run killed mid-session."""
    profile = tiny_profile(tmp_path, max_new_tokens=400)
    log = tmp_path / "killed.specmon"
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path / "runtime")}
    run = subprocess.Popen(
        [sys.executable, "-m", "specmon.cli", "run", "--headless", "--profile", str(profile), "--log", str(log)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
        env=env,
    )

    def decoding() -> bool:
        assert run.poll() is None, f"the run ended ({run.returncode}) before it was killed"
        return log.exists() and log.stat().st_size > 20_000

    wait_until(decoding, "the run well into its decode", timeout=120)
    run.send_signal(signal.SIGKILL)
    run.wait()
    done = subprocess.run(
        [sys.executable, "-m", "specmon.cli", "attach", "--headless", str(log)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=60,  # only stops a hang: the line below names the idle timeout it ended by
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"specmon: {log} has not grown for 10 s and has no SessionFinished: its session was killed or hung; "
        f"`specmon log info {log}` shows what it holds"
    ]
    assert done.stdout.count("\n") > 10  # the rounds it did log were shown first


# -- damaged-log fuzzing ---------------------------------------------------------------------------

ORIGINAL = written(TUI_EVENTS)
STARTS = frame_starts(ORIGINAL)
OTHERS = {"same events, another log": written(TUI_EVENTS), "another session": written(POLICY_EVENTS)}
V1 = (FIXTURES / "session-tui.specmon").read_bytes()
V1_STARTS = frame_starts(V1)
STATS: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)


def _frame(data_starts, i):
    return slice(data_starts[i], data_starts[i + 1])


frame_index = st.integers(0, len(STARTS) - 2)
position = st.integers(0, len(ORIGINAL))
BYTE_DAMAGE = st.one_of(  # drawn directly, not filtered out of DAMAGE: a filter rejecting 6 draws in 10
    # now and then failed hypothesis's filter_too_much health check
    st.tuples(st.just("truncate"), st.integers(0, len(ORIGINAL) - 1)),
    st.tuples(
        st.just("flip bits"),
        st.lists(st.tuples(st.integers(0, len(ORIGINAL) - 1), st.integers(0, 7)), min_size=1, max_size=4),
    ),
    st.tuples(st.just("overwrite"), position, st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("insert garbage"), position, st.binary(min_size=1, max_size=64)),
)
DAMAGE = st.one_of(
    BYTE_DAMAGE,
    st.tuples(st.just("duplicate a frame"), frame_index, st.integers(0, len(STARTS) - 1)),
    st.tuples(st.just("swap two frames"), frame_index, frame_index).filter(lambda op: op[1] != op[2]),
    st.tuples(st.just("drop a frame"), frame_index),
    st.tuples(st.just("splice another log's frame"), st.sampled_from(sorted(OTHERS)), frame_index, st.booleans()),
    st.tuples(
        st.just("splice another log's bytes"),
        st.sampled_from(sorted(OTHERS)),
        position,
        st.integers(0, len(ORIGINAL)),
        st.integers(1, 400),
        st.booleans(),
    ),
    st.tuples(st.just("splice its own bytes"), position, position, st.integers(1, 400)),
)


def damage(data: bytes, op: tuple) -> bytes:
    kind, *args = op
    if kind == "truncate":
        return data[: args[0]]
    if kind == "flip bits":
        out = bytearray(data)
        for index, bit in args[0]:
            if index < len(out):
                out[index] ^= 1 << bit
        return bytes(out)
    if kind == "overwrite":
        at, patch = args
        return data[:at] + patch + data[at + len(patch) :]
    if kind == "insert garbage":
        return data[: args[0]] + args[1] + data[args[0] :]
    if kind == "duplicate a frame":
        i, at = args
        return data[: STARTS[at]] + ORIGINAL[_frame(STARTS, i)] + data[STARTS[at] :]
    if kind == "swap two frames":
        i, j = sorted(args)
        f = lambda k: ORIGINAL[_frame(STARTS, k)]  # noqa: E731
        return data[: STARTS[i]] + f(j) + data[STARTS[i + 1] : STARTS[j]] + f(i) + data[STARTS[j + 1] :]
    if kind == "drop a frame":
        return data[: STARTS[args[0]]] + data[STARTS[args[0] + 1] :]
    if kind == "splice another log's frame":  # a whole valid frame of another log, at the same index
        other, i, shifted = args
        other_bytes = OTHERS[other]
        other_starts = frame_starts(other_bytes)
        j = min(i + shifted, len(other_starts) - 2)
        return data[: STARTS[i]] + other_bytes[_frame(other_starts, j)] + data[STARTS[i + 1] :]
    if kind == "splice another log's bytes":
        other, at, src, size, insert = args
        piece = OTHERS[other][src : src + size]
        return data[:at] + piece + data[at + (0 if insert else len(piece)) :]
    at, src, size = args  # splice its own bytes: a copy of another stretch of the same log
    return data[:at] + ORIGINAL[src : src + size] + data[at + size :]


def _common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if a[:mid] == b[:mid] else (lo, mid)
    return lo


def check_damaged(
    data: bytes, original: bytes, starts: list[int], events: list, tmp: Path, chunk: int, family: str
) -> None:
    """The three promises, for one damaged log; counts go to STATS[family]."""
    stats = STATS[family]
    stats["tried"] += 1
    try:
        got, error = outcome(data, tmp, chunk)
    except Exception:
        stats["crash"] += 1
        raise
    same = _common_prefix(data, original)  # the damage starts here
    whole = bisect.bisect_right(starts, same) - 1 if same >= starts[0] else 0  # frames wholly before it
    if got != events[: len(got)]:
        stats["invented event"] += 1
    if len(got) < whole:
        stats["event lost before the damage"] += 1
    assert got == events[: len(got)], "an event that is not the original's at its position"
    assert len(got) >= whole, "an event before the damage was not returned"
    cut_between_frames = len(data) == same and len(data) in starts
    bare_preamble = len(data) == starts[0] and same >= PREAMBLE_SIZE  # a log id with no frame to check it against
    if data == original or cut_between_frames or bare_preamble:
        stats["no damage to see" if data != original else "undone"] += 1
        assert error is None and len(got) == whole
        return
    stats["clear error"] += 1
    assert error is not None, "damage read as a whole log"
    # More than `whole` only where a frame's bytes changed but not its event: its frame 0 rebound to another
    # log's id along with the preamble (a splice of a log of the same events); never an event of its own.
    if isinstance(error, LogDamaged) and same >= PREAMBLE_SIZE:
        assert error.offset == starts[len(got)], "the offset is not where the damaged frame begins"


def _follow_agrees(data: bytes, tmp: Path) -> None:
    """follow_log on a damaged log nobody writes: the same events, then a SpecmonError (or SessionFinished)."""
    path = tmp / "f.specmon"
    path.write_bytes(data)
    expected, _ = outcome(data, tmp)
    got, error = [], None
    try:
        got.extend(follow_log(path, poll_s=0.0, idle_timeout_s=0.0))
    except SpecmonError as exc:
        error = exc
    assert got == expected[: len(got)]
    assert (error is None) == bool(got and isinstance(got[-1], SessionFinished))
    assert error is None or got == expected


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def fuzz_v2(ops, chunk, tmp: Path) -> None:
    data = ORIGINAL
    for op in ops:
        data = damage(data, op)
    family = ops[0][0]
    check_damaged(data, ORIGINAL, STARTS, TUI_EVENTS, tmp, chunk, family if len(ops) == 1 else "2 or 3 of them at once")
    _follow_agrees(data, tmp)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(DAMAGE, min_size=1, max_size=3), chunk=st.integers(1, 1 << 16))
@example(ops=[("duplicate a frame", 40, 41)], chunk=1 << 16)
@example(ops=[("swap two frames", 3, 4)], chunk=5)
@example(ops=[("splice another log's frame", "another session", 7, False)], chunk=1)
@example(ops=[("splice another log's frame", "same events, another log", 7, False)], chunk=12)
@example(ops=[("truncate", STARTS[50])], chunk=64)
def test_fuzz_damaged_logs_quick(ops, chunk, fuzz_dir):
    fuzz_v2(ops, chunk, fuzz_dir)


@pytest.mark.slow
@settings(max_examples=4000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(DAMAGE, min_size=1, max_size=3), chunk=st.integers(1, 1 << 16))
def test_fuzz_damaged_logs(ops, chunk, fuzz_dir):
    fuzz_v2(ops, chunk, fuzz_dir)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(BYTE_DAMAGE, min_size=1, max_size=3), chunk=st.integers(1, 1 << 16))
def test_fuzz_damaged_format_1_logs(ops, chunk, fuzz_dir):
    """Format 1 (no frame numbers) under byte damage: no crash, no invented event, nothing lost before it."""
    data = V1
    for op in ops:
        data = damage(data, op)
    check_damaged(
        data,
        V1,
        V1_STARTS,
        TUI_EVENTS,
        fuzz_dir,
        chunk,
        "format 1: " + (ops[0][0] if len(ops) == 1 else "2 or 3 of them at once"),
    )


@pytest.fixture(scope="module", autouse=True)
def fuzz_table():
    yield
    if not STATS:
        return
    columns = {
        "tried": "tried",
        "clear error": "clear error",
        "no damage to see": "none to see",
        "undone": "undone",
        "crash": "traceback",
        "invented event": "invented",
        "event lost before the damage": "lost before",
    }
    print("\n\ndamaged-log fuzz: read_log and a chunked FrameDecoder (format 2: also follow_log)")
    print(f"{'damage':<40}" + "".join(f"{title:>12}" for title in columns.values()))
    total: collections.Counter = collections.Counter()
    for family, counts in sorted(STATS.items(), key=lambda item: (item[0].startswith("format 1"), item[0])):
        total.update({c: counts[c] for c in columns})
        print(f"{family:<40}" + "".join(f"{counts[c]:>12}" for c in columns))
    print(f"{'all':<40}" + "".join(f"{total[c]:>12}" for c in columns))
