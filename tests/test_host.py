"""The host's contention as a round reads it: PSI where the kernel has it, /proc/stat otherwise."""

import os

import pytest

from specmon.telemetry import host
from specmon.telemetry.host import StallClock, psi_stall_us, stall_ms, stat_us

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
    try:
        before, start = clock.stall(), time.perf_counter()
        while time.perf_counter() - start < 0.5:
            pass  # this process wants a CPU too
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

    profile, log = tiny_profile(tmp_path, max_new_tokens=16), tmp_path / "busy.specmon"
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        done = subprocess.run([sys.executable, "-m", "specmon.cli", "run", "--headless", "--profile", str(profile),
                               "--classes", "chat", "--log", str(log)], capture_output=True, text=True, timeout=600)
    finally:
        for p in hogs:
            p.kill()
            p.wait()
    assert done.returncode == 0, done.stderr
    host = tally(read_log(log))
    assert host.measured > 0 and host.busy  # most rounds waited for a CPU the hogs held
    said = " ".join(done.stderr.split())  # stderr wraps at 80 columns
    assert f"host busy: {host.disturbed:,} of {host.measured:,} rounds disturbed" in said
