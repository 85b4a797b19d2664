"""The n-gram drafter's confidence as the policy learns it (classes[i].ngram.max_match).

A confident n-gram drafter proposes only on a match of min_match tokens or more. Were it to need
one token more, the rounds at k whose match was exactly min_match tokens long would have been
plain steps. So when those rounds' goodput has a 95% interval over prompts wholly below plain's,
min_match rises by one: a failed draft costs the host's verify pass, 1.2x a plain step on one
machine and 2x on another. A round records its match's length (RoundVerified.matched); in older
logs, which do not, a round that drafted exactly min_match tokens, short of k, stands for one
(the drafter then drafted no further than its match was long). Evidence and thresholds (`match`:
the min_match judged) as in decide.py, so `policy explain` recomputes it from the cited rounds."""

from __future__ import annotations

from collections.abc import Sequence

from specmon.policy.decide import ROUND_ID, Outcome, Row, _sides, by_draft_len, estimate, goodput


def match_rows(rows: Sequence[Row], k: int, match: int) -> list[Row]:
    """Rounds at k whose match was exactly `match` tokens: the ones a min_match one higher would
    have left silent."""
    return [r for r in rows if r.draft_len == k and _matched(r, match) == match]


def stale(row: Row, match: int) -> bool:
    """A round whose draft a min_match of `match` would not have proposed: its match was shorter."""
    return 0 < _matched(row, match) < match


def _matched(row: Row, match: int) -> int:
    """The round's match length; in an older log (none recorded) its draft's length where that was
    short of both k and `match` + 1, taken as its match length (as the rule always has: the
    context's end or min_seen may have cut a longer one), else unknown (0)."""
    if row.matched:
        return row.matched
    return row.proposed if row.proposed < row.draft_len and row.proposed <= match else 0


def decide_match(speculate: bool, k: int, rows: list[Row], thresholds: dict[str, float]) -> Outcome | None:
    """min_match + 1 when the rounds whose match was exactly min_match tokens surely lose to plain
    (speculation and k stay as they are: an off class still drafts in the prompts it watches)."""
    match = int(thresholds["match"])
    ordered = sorted(rows, key=ROUND_ID)
    short, plain = match_rows(ordered, k, match), by_draft_len(ordered, thresholds).get(0, [])
    if len(short) < thresholds["min_rounds"] or len(plain) < thresholds["plain_rounds"]:
        return None
    est = estimate(short, plain, below=1.0)
    if est is None or est.high is None or est.high >= 1.0:
        return None
    inputs = {"goodput_k0": goodput(plain), f"goodput_k{k}": goodput(short), **_sides(est, short, plain, k, 0)}
    return Outcome(speculate, k, "ngram.max_match", inputs, sorted({r.round_id for r in [*short, *plain]}), match + 1)
