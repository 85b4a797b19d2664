"""The host's contention as a round reads it: PSI where the kernel has it, /proc/stat otherwise."""

import os

import pytest

from specmon.telemetry import host
from specmon.metrics.contention import clock
from specmon.telemetry.host import StallClock, psi_stall_us, stall_ms, stat_us
from events import prompt_started, round_verified

PSI = b"some avg10=1.50 avg60=2.11 avg300=0.76 total=2827120\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"


def test_psi_reads_the_some_total_in_microseconds():
    assert psi_stall_us(lambda path, size: PSI) == 2827120
    assert psi_stall_us(lambda path, size: None) is None  # no PSI in this kernel
    assert psi_stall_us(lambda path, size: b"garbage\n") is None


def test_stat_reads_busy_and_idle_microseconds():
    line = b"cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3\n"
    busy, idle = stat_us(lambda path, size: line)
    tick = 1e6 / os.sysconf("SC_CLK_TCK")
    assert busy == pytest.approx(150 * tick) and idle == pytest.approx(850 * tick)


def test_without_psi_other_processes_time_beyond_the_idle_cores_is_the_stall():
    # 2 cores over 10 ms: 20 ms of CPU; this process used 10, others 10, idle 0 -> 10 ms / 2 cores
    readings = iter([(0.0, 0.0), (0.0, 0.0), (20_000.0, 0.0), (40_000.0, 0.0), (45_000.0, 15_000.0)])
    own = iter([0.0, 10_000.0, 20_000.0, 25_000.0])
    clock = StallClock(psi=lambda: None, stat=lambda: next(readings), own=lambda: next(own), cores=2)
    assert clock.source == "stat"
    first = clock.stall()
    assert stall_ms(first, clock.stall()) == pytest.approx(5.0)  # others 10 ms beyond 0 idle, per core
    assert stall_ms(first, clock.stall()) == pytest.approx(10.0)  # 5 ms more
    later = clock.stall()  # others 0 ms beyond 15 ms idle: a host with room to spare adds nothing
    assert later == pytest.approx(10_000.0)


def test_a_host_without_either_says_nothing():
    clock = StallClock(psi=lambda: None, stat=lambda: None)
    assert clock.source is None and clock.stall() is None and stall_ms(None, None) is None
    reads = iter([(0.0, 0.0), None])  # /proc/stat readable at start, then not: a round unmeasured, no crash
    clock = StallClock(psi=lambda: None, stat=lambda: next(reads), own=lambda: 0.0)
    assert clock.source == "stat" and clock.stall() is None


@pytest.mark.skipif(not os.path.exists("/proc/pressure/cpu"), reason="this kernel has no PSI")
def test_a_busy_loop_on_every_core_shows_as_stall_here():
    """The real file: a process that keeps every core busy makes this one wait."""
    import multiprocessing
    import time

    clock = StallClock()
    stop = multiprocessing.Event()
    hogs = [multiprocessing.Process(target=_spin, args=(stop,)) for _ in range(os.cpu_count() or 1)]
    for p in hogs:
        p.start()

    def spin(seconds):
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            pass  # this process wants a CPU too

    try:
        clock.stall()
        spin(1.1)  # a first window, in which the hogs show as other work
        before = clock.stall()
        spin(0.5)
        lost = stall_ms(before, clock.stall())
    finally:
        stop.set()
        for p in hogs:
            p.join()
    assert lost > host.CONTENTION * 500


def _spin(stop):
    while not stop.is_set():
        pass


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/pressure/cpu"), reason="this kernel has no PSI")
def test_a_run_beside_a_hog_on_every_core_says_it_was_disturbed(tmp_path):
    """`specmon run` with busy loops on every core: its rounds record the stall, and the run says so."""
    import subprocess
    import sys

    from specmon.events.log import read_log
    from specmon.metrics.contention import tally
    from tinymodel import tiny_profile

    profile, log = tiny_profile(tmp_path, max_new_tokens=64), tmp_path / "busy.specmon"  # seconds of rounds
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "specmon.cli", "run", "--headless", "--profile", str(profile), "--log", str(log)]
            + ["--classes", "chat,rewrite"],  # a few prompts: dozens of rounds, enough to call the host busy
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        for p in hogs:
            p.kill()
            p.wait()
    assert done.returncode == 0, done.stderr
    host = tally(read_log(log))
    assert host.measured > 0 and host.busy  # most rounds waited for a CPU the hogs held
    said = " ".join(done.stderr.split())  # stderr wraps at 80 columns
    assert f"host busy: {host.disturbed:,} of {host.measured:,} rounds disturbed" in said


def _paired_rounds(stall_ms_of, t0=1_700_000_000.0):
    """Four prompts of chat, each plain then at k=4, 10 rounds a side; stall_ms_of(i) per round."""
    events, rid = [], 0
    for p in range(4):
        for k in (0, 4):
            events.append(prompt_started(t=t0 + rid, prompt_id=f"chat-{p}", draft_len=k))
            for i in range(10):
                proposed = [1, 2, 3, 4] if k else []
                events.append(
                    round_verified(
                        t=t0 + rid,
                        round_id=rid,
                        prompt_id=f"chat-{p}",
                        round_index=i,
                        draft_len=k,
                        proposed=proposed,
                        accepted=1 if k else 0,
                        rejection_pos=1 if k else None,
                        emitted=[5, 6] if k else [5],
                        verify_ms=30.0 + p if k else 10.0,
                        host_stall_ms=stall_ms_of(rid),
                    )
                )
                rid += 1
    return events


def test_a_speedup_from_disturbed_rounds_is_called_busy_host_not_slower():
    from specmon.metrics.stats import class_stats, summary

    quiet = summary(class_stats(_paired_rounds(lambda rid: 0.0)))["classes"]["chat"]
    assert quiet["speedup_verdict"] == "slower" and quiet["speedup"] < 1  # 2 tokens per 30+ ms against 1 per 10
    assert (quiet["host_measured_rounds"], quiet["host_disturbed_rounds"]) == (80, 0)
    busy = summary(class_stats(_paired_rounds(lambda rid: 9.0 if rid % 5 == 0 else 0.0)))["classes"]["chat"]
    assert busy["speedup"] == quiet["speedup"] and busy["speedup_verdict"] == "busy host"
    assert busy["host_disturbed_rounds"] == 16 and busy["host_disturbed_share"] == pytest.approx(0.2)


def test_the_title_says_the_host_is_busy_and_later_when_it_was():
    from specmon.tui.rows import status_line
    from specmon.tui.state import ViewState

    events = _paired_rounds(lambda rid: 9.0 if 20 <= rid < 40 else 0.0)  # prompts 1's rounds: busy
    state = ViewState()
    state.apply(events[:44])  # 40 rounds, the last 20 busy
    assert "host busy: 20/40 rounds" in status_line(state, "fixture", []).plain
    state.apply(events[44:] + _paired_rounds(lambda rid: 0.0, t0=1_700_001_000.0))  # 120 quiet rounds since
    title = status_line(state, "fixture", []).plain
    assert "host busy:" not in title
    # rounds 20-39 were disturbed; the title said so from round 24 (5 of 25 recent rounds: MIN_DISTURBED)
    assert f"host was busy {clock(1_700_000_024.0)}-{clock(1_700_000_039.0)}" in title


def test_a_quiet_session_says_nothing_of_the_host():
    from specmon.tui.rows import status_line
    from specmon.tui.state import ViewState

    state = ViewState()
    state.apply(_paired_rounds(lambda rid: 9.0 if rid == 7 else 0.0))  # one stray round, 1 of the first 8
    assert "host" not in status_line(state, "fixture", []).plain


def test_log_info_says_how_busy_the_host_was_and_when(tmp_path):
    import subprocess
    import sys

    from specmon.events.log import LogWriter

    def info(stall_ms_of):
        log = tmp_path / f"{len(list(tmp_path.iterdir()))}.specmon"
        with LogWriter(log) as writer:
            for event in _paired_rounds(stall_ms_of):
                writer.write(event)
        done = subprocess.run(
            [sys.executable, "-m", "specmon.cli", "log", "info", str(log)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "COLUMNS": "200"},
        )
        return " ".join(done.stdout.split())

    busy = info(lambda rid: 9.0 if rid % 5 == 0 else 0.0)
    first, last = clock(1_700_000_000.0), clock(1_700_000_075.0)
    assert f"host busy: 16 of 80 rounds disturbed (20.0%), peak 90% of a round, {first}-{last}" in busy
    assert "×~" in busy and "slower" not in busy  # its speedup is marked, not called slower
    assert "host quiet" in info(lambda rid: 0.0)
    assert "host " not in info(lambda rid: None).replace("host:", "")  # an older log: nothing said


def test_psi_counts_only_while_other_processes_use_a_cpu():
    """Our own threads waiting on each other (a live view redrawing beside the model) are not a busy host."""
    psi, busy, own, now = [0], [0.0], [0.0], [0.0]
    clock = StallClock(
        psi=lambda: psi[0], stat=lambda: (busy[0], 0.0), own=lambda: own[0], cores=2, clock=lambda: now[0]
    )

    def second(stalled_us, others_us, own_us=1_000_000.0):
        """One second: PSI grows by stalled_us; the machine's busy time by ours and the others'."""
        before = clock.stall()
        now[0] += 1.0
        psi[0] += stalled_us
        own[0] += own_us
        busy[0] += own_us + others_us
        return clock.stall() - before

    first = clock.stall()
    now[0], psi[0] = 0.5, 100_000
    assert clock.stall() - first == 0  # within the first window nothing shows other work: not counted
    assert second(200_000, 0.0) == 0  # a second with no other process: our own threads' stall
    assert second(300_000, 50_000.0) == 0  # others at 5% of a core: the ticks' noise, not counted
    assert second(300_000, 900_000.0) == 300_000  # a hog's second
    now[0] += 600.0  # a server idle for ten minutes, the hog gone: the old window is not judged...
    clock.stall()
    assert clock.others_active
    now[0] += 0.3  # ...a fresh one is, a quarter second on: no other work now
    psi[0], own[0], busy[0] = psi[0] + 30_000, own[0] + 300_000.0, busy[0] + 300_000.0
    clock.stall()
    assert not clock.others_active


def test_a_hog_there_from_the_start_shows_after_a_quarter_second():
    """The cost curve is timed in a session's first seconds: the first look at other work comes soon."""
    psi, busy, own, now = [0], [0.0], [0.0], [0.0]
    clock = StallClock(
        psi=lambda: psi[0], stat=lambda: (busy[0], 0.0), own=lambda: own[0], cores=2, clock=lambda: now[0]
    )
    clock.stall()
    now[0], psi[0], own[0], busy[0] = 0.3, 120_000, 300_000.0, 600_000.0  # others held a core for 0.3 s
    assert clock.stall() == 120_000 and clock.others_active
