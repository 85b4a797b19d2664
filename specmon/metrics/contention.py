"""Which rounds the host disturbed, and how to say so beside a figure: the one definition the
TUI, `log info`, reports, sweeps and benches share (thresholds from telemetry.host)."""

from __future__ import annotations

from dataclasses import dataclass

from specmon.metrics.format import clock
from specmon.metrics.rates import ratio, round_ms
from specmon.telemetry.host import CONTENTION

# a figure whose rounds were this disturbed or more is marked as measured on a busy host
MARK_SHARE = 0.10
MIN_DISTURBED = 5  # and at least this many of them: one stray round in a class's first ten is not a busy host


def stall_share(ev) -> float | None:
    """The share of a round's time in which the host was contended (telemetry.host); None where not measured."""
    stalled = getattr(ev, "host_stall_ms", None)
    if stalled is None:
        return None
    return min(1.0, ratio(stalled, round_ms(ev)) or 0.0)  # its readings bracket the round, a little wider


def disturbed(ev) -> bool:
    share = stall_share(ev)
    return share is not None and share >= CONTENTION


@dataclass
class HostTally:
    """Rounds measured, rounds disturbed, and when: counts kept, shares derived."""

    measured: int = 0
    disturbed: int = 0
    peak: float = 0.0  # the largest stall share of one round
    first_t: float | None = None  # wall clock of the first and last disturbed round
    last_t: float | None = None

    def __add__(self, other: HostTally) -> HostTally:
        """Two sets of rounds as one (a speedup's spec and plain sides)."""
        firsts = [t for t in (self.first_t, other.first_t) if t is not None]
        lasts = [t for t in (self.last_t, other.last_t) if t is not None]
        counts = (self.measured + other.measured, self.disturbed + other.disturbed, max(self.peak, other.peak))
        return HostTally(*counts, min(firsts, default=None), max(lasts, default=None))

    def add(self, ev) -> None:
        share = stall_share(ev)
        if share is None:
            return
        self.measured += 1
        self.peak = max(self.peak, share)
        if share >= CONTENTION:
            self.disturbed += 1
            self.first_t = ev.t if self.first_t is None else self.first_t
            self.last_t = ev.t

    @property
    def share(self) -> float | None:
        """Disturbed rounds over measured ones; None where no round was measured."""
        return ratio(self.disturbed, self.measured)

    def figures(self, prefix: str = "") -> dict:
        """The rounds the host disturbed, for JSON: counts, and the share figures are judged by."""
        return {
            f"{prefix}measured_rounds": self.measured,
            f"{prefix}disturbed_rounds": self.disturbed,
            f"{prefix}disturbed_share": self.share,
            f"{prefix}peak_stall": self.peak if self.measured else None,
        }

    @property
    def busy(self) -> bool:
        """Enough of the rounds were disturbed that their figures should say so."""
        share = self.share
        return share is not None and share >= MARK_SHARE and self.disturbed >= MIN_DISTURBED

    def said(self) -> str:
        """How the host was, for people, as log info and reports print it: "quiet", or the disturbed share and
        peak and when the disturbed rounds ran; '' where not measured."""
        if not self.measured:
            return ""
        if not self.disturbed:
            return "quiet"
        state = "busy" if self.busy else "mostly quiet"
        rounds = "round" if self.measured == 1 else "rounds"
        return (
            f"{state}: {self.disturbed:,} of {self.measured:,} {rounds} disturbed "
            f"({self.share:.1%}), peak {self.peak:.0%} of a round, {clock(self.first_t)}-{clock(self.last_t)}"
        )

    def line(self) -> str | None:
        """A warning beside a run's figures, with when; None where no round was disturbed."""
        if not self.disturbed:
            return None
        return (
            f"host {self.said()}: other work held a CPU (stall {CONTENTION:.0%}+ of a round); "
            "paired ratios hold better than absolute tok/s"
        )


def tally(events) -> HostTally:
    out = HostTally()
    for ev in events:
        out.add(ev)  # an event without host_stall_ms is not measured
    return out
