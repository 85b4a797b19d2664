"""The ratios everything else derives from (docs/live-view.md's speed table): round time,
goodput and speedup, each defined once here and used by the TUI, tables, reports, the policy
and the benchmarks alike."""

from __future__ import annotations


def ratio(num: float, den: float) -> float | None:
    """num / den, or None (shown as N/A) when there is nothing to divide by."""
    return num / den if den else None


def acceptance_rate(accepted: int, proposed: int) -> float | None:
    """Σ accepted / Σ proposed (over one round or many); nothing proposed gives None, never 0."""
    return ratio(accepted, proposed)


def round_ms(ev) -> float:
    """Wall time of a round (or of summed rounds): drafting + the target's verify pass + the rest."""
    return ev.draft_ms + ev.verify_ms + ev.overhead_ms


def goodput(emitted: int, ms: float) -> float | None:
    """Accepted progress per millisecond: emitted tokens / round ms."""
    return ratio(emitted, ms)


def speedup(spec_goodput: float | None, plain_goodput: float | None) -> float | None:
    """Goodput with speculation / goodput of plain decoding (same class, same run)."""
    if spec_goodput is None or not plain_goodput:
        return None
    return spec_goodput / plain_goodput


def time_to_first_token_s(arrived: float, first_round_t: float) -> float:
    """A served request's wait for its first tokens, queue wait included: from joining the queue
    (QueueSample.arrived) to its first round (RoundVerified.t), both wall-clock times in the log."""
    return first_round_t - arrived
