"""How much other work on the host kept this process waiting for a CPU: read around every round,
so a figure can say which of its rounds were measured on a busy host.

Linux's pressure stall information (/proc/pressure/cpu, 'some' total) counts the microseconds in
which some runnable task waited for a CPU; it counts while other processes use a CPU (from
/proc/stat), so this process's own threads waiting on each other are not taken for a busy host.
Without PSI, /proc/stat's other processes' CPU time in excess of the idle cores stands in. None
where neither exists."""

from __future__ import annotations

import os
import time

from specmon.telemetry.procfs import kept_pread

# A round is disturbed when other work held a CPU for 5% of its time or more. Chosen from plain steps
# timed with 0, 1 and 2 busy-loop hogs on 2 cores (docs/measuring.md): below 5% the median step was
# within 2% of the quiet one on torch and llama.cpp; from 5 to 10%, llama.cpp's was 1.23x, torch's 1.13x
CONTENTION = 0.05

OTHERS_WINDOW_S = 1.0  # /proc/stat counts in 10 ms ticks: over a second, its error is 2% of a core
OTHERS_MIN = 0.10  # of a core: less than that is the kernel's own threads, and the ticks' error
FIRST_WINDOW_S = 0.25  # the first look comes sooner (the cost curve is timed in the first seconds): a hog shows in it


def psi_stall_us(read=kept_pread) -> int | None:
    """Microseconds since boot in which some task waited for a CPU, or None without PSI."""
    data = read("/proc/pressure/cpu", 256)
    if not data:
        return None
    try:
        return int(data.split(b"\n", 1)[0].rsplit(b"total=", 1)[1])
    except (IndexError, ValueError):
        return None


def stat_us(read=kept_pread) -> tuple[float, float] | None:
    """(busy, idle) CPU microseconds since boot over all cores, from /proc/stat's first line."""
    data = read("/proc/stat", 512)
    if not data:
        return None
    try:
        ticks = [int(x) for x in data.split(b"\n", 1)[0].split()[1:]]
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle and iowait
    except (ValueError, IndexError):
        return None
    per_tick = 1e6 / os.sysconf("SC_CLK_TCK")
    return (sum(ticks) - idle) * per_tick, idle * per_tick


def own_cpu_us() -> float:
    """This process's CPU time, every thread, to the nanosecond (times() would count 10 ms ticks)."""
    return time.process_time() * 1e6


class StallClock:
    """stall(): the running total of the stall (above), counted while other processes used OTHERS_MIN of a core or
    more over the last OTHERS_WINDOW_S; two readings' difference is a round's; None where the host cannot say. The
    gate keeps out this process's own threads (a live view's redraws), but cannot tell whose wait it was: a niced
    background job that waits while we run still reads as contention. Called from the decode loop's thread only."""

    def __init__(self, psi=psi_stall_us, stat=stat_us, own=own_cpu_us, cores: int | None = None, clock=time.monotonic):
        self.psi, self.stat, self.own, self.clock = psi, stat, own, clock
        self.cores = cores or os.cpu_count() or 1
        self.source = "psi" if psi() is not None else "stat" if stat() is not None else None
        self._total = 0.0  # the stall counted so far, µs
        self._last_psi: int | None = None
        self._last: tuple[float, float, float] | None = None  # /proc/stat's busy, idle and our CPU, µs
        self._window: tuple[float, float, float] | None = None  # (time, busy, own) when the window began
        self.others_active = False  # until the first window shows other work (its stall is taken as quiet)
        self._looked = False  # a window has been judged

    def stall(self) -> float | None:
        if self.source == "psi":
            if (total := self.psi()) is None:
                return None
            self._watch_others()
            if self._last_psi is not None and self.others_active:
                self._total += max(0, total - self._last_psi)
            self._last_psi = total
            return self._total
        if self.source != "stat" or (read := self.stat()) is None:
            return None  # /proc/stat unreadable mid-run: this round is not measured
        # other processes' CPU time beyond what idle cores could have given them, per core
        now = (*read, self.own())
        if self._last is not None:
            others = (now[0] - self._last[0]) - (now[2] - self._last[2])
            self._total += max(0.0, others - (now[1] - self._last[1])) / self.cores
        self._last = now
        return self._total

    def _watch_others(self) -> None:
        """Every OTHERS_WINDOW_S: did other processes use OTHERS_MIN of a core or more since the last look?"""
        now = self.clock()
        window = OTHERS_WINDOW_S if self._looked else FIRST_WINDOW_S
        if self._window is not None and now - self._window[0] < window:
            return
        if (read := self.stat()) is None:
            return
        busy, own = read[0], self.own()
        if self._window is not None and now - self._window[0] > 2 * OTHERS_WINDOW_S:
            self._window, self._looked = None, False  # an idle gap (a server between requests): look again soon
        if self._window is not None:
            others = (busy - self._window[1]) - (own - self._window[2])
            self.others_active = others >= OTHERS_MIN * (now - self._window[0]) * 1e6
            self._looked = True
        self._window = (now, busy, own)


def stall_ms(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else max(0.0, after - before) / 1e3
