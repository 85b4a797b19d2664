"""The rules older specmon versions decided by, kept only so `specmon policy explain` recomputes
the decisions in their logs (the live policy is gate.py). Each logged decision carries the
thresholds it was decided with, and the rules below read them as those versions did:

goodput(k) = sum emitted / sum round ms over the cited rounds at draft length k (k = 0: plain).
- on -> off when goodput(k) / goodput(0) < 1 + min_gain; early, after early_rounds rounds, when
  even OPTIMISM more all-accepted rounds would not pay (older: a ratio below early_off).
- off -> on when the best k in range beats plain by min_gain + hysteresis.
- k moves to the k in [k_min, k_max] whose goodput beats k's by k_gain; with `paired`, over the
  prompts where both ran; `adjacent`, each probe round beside the round at k after it; `capped`,
  only pairs where a round drafted as far as the shorter k.
- `interval`: a switch or move needs the goodput ratio's seeded 95% interval over prompts past
  its line; `prompt`: one prompt's own first rounds turn it on or off; `silent_plain`: a round
  that drafted nothing also counts as plain; `match`: the n-gram min_match rises by one when the
  rounds whose match was exactly min_match tokens surely lose to plain steps.
Thresholds missing from a log fall back as those versions did: plain_rounds -> min_rounds,
k_gain -> min_gain."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from typing import NamedTuple

from specmon.metrics import rates
from specmon.metrics.interval import PromptTotals, SpeedupEstimate, point_ratio, speedup_estimate

OPTIMISM = 2  # early off pretends this many more rounds at k accepted every draft token


class Row(NamedTuple):  # a tuple: built once a round inside the decode loop, where a frozen dataclass cost 3x
    round_id: int
    draft_len: int
    emitted: int
    round_ms: float
    prompt_id: str = ""
    proposed: int = 0  # draft tokens offered: a prompt decision judges only rounds that drafted
    index: int = -1  # the round's place in its prompt run (RoundVerified.round_index): which round came next
    matched: int = 0  # a confident n-gram draft's match length (RoundVerified.matched; 0 in older logs)

    @classmethod
    def of(cls, ev) -> "Row":
        """The evidence a RoundVerified event contributes: live (PolicyEngine) and in explain alike."""
        return cls(
            ev.round_id,
            ev.draft_len,
            len(ev.emitted),
            rates.round_ms(ev),
            ev.prompt_id,
            len(ev.proposed),
            ev.round_index,
            ev.matched,
        )


# a Row's fields as C-speed keys: a decision check sorts and sums thousands of rows
ROUND_ID, EMITTED, ROUND_MS, PROMPT_ID = itemgetter(0), itemgetter(2), itemgetter(3), itemgetter(4)


@dataclass(frozen=True)
class Outcome:
    speculate: bool
    k: int
    rule: str  # "policy.min_gain" | "policy.hysteresis" | "draft_len" | "policy.prompt_rounds" | "ngram.max_match"
    inputs: dict[str, float]
    round_ids: list[int]
    match: int = 0  # the n-gram drafter's min_match after a match.py decision; 0 otherwise


def goodput(rows: Sequence[Row]) -> float:
    """metrics' goodput over the rows (0.0, never better than anything, when they took no time)."""
    return rates.goodput(sum(map(EMITTED, rows)), sum(map(ROUND_MS, rows))) or 0.0


def silent(row: Row) -> bool:
    """A round at k > 0 whose drafter proposed nothing: one plain step's work (policy.silent_plain)."""
    return bool(row.draft_len) and not row.proposed


def by_draft_len(rows: Sequence[Row], thresholds: dict[str, float]) -> dict[int, list[Row]]:
    """The rows by the k they ran at, in the given order; with policy.silent_plain each silent
    round is under 0 (plain) as well as under its k."""
    as_plain = bool(thresholds.get("silent_plain"))
    by_k: dict[int, list[Row]] = {}
    for row in rows:
        by_k.setdefault(row.draft_len, []).append(row)
        if as_plain and silent(row):
            by_k.setdefault(0, []).append(row)
    return by_k


def decide(speculate: bool, k: int, rows: list[Row], thresholds: dict[str, float]) -> Outcome | None:
    """What should change for one class, given the evidence rows; None when nothing should.

    The outcome cites exactly the rounds its inputs were computed from, so `decide` on those
    rounds alone gives the same outcome (that is what `specmon policy explain` checks)."""
    if thresholds.get("prompt"):
        return decide_prompt(speculate, k, rows, thresholds)
    if thresholds.get("interval"):
        return _decide_interval(speculate, k, rows, thresholds)
    by_k = by_draft_len(rows, thresholds)
    plain_rounds = thresholds.get("plain_rounds", thresholds["min_rounds"])
    enough = {kk: rr for kk, rr in by_k.items() if len(rr) >= (plain_rounds if kk == 0 else thresholds["min_rounds"])}
    if speculate and 0 in enough and k not in enough and k in by_k:
        return _early_off(k, enough[0], by_k[k], thresholds)
    if 0 not in enough:
        return None
    rate = {kk: goodput(rr) for kk, rr in enough.items()}
    in_range = sorted(kk for kk in enough if thresholds["k_min"] <= kk <= thresholds["k_max"])
    if not speculate:
        best = max(in_range, key=lambda kk: rate[kk], default=k) if thresholds["adapt"] else k
        if best in enough and rate[best] >= rate[0] * (1 + thresholds["min_gain"] + thresholds["hysteresis"]):
            return _outcome(True, best, "policy.hysteresis", rate, enough, [0, best], best)
        return None
    if k not in enough:
        return None
    ratio = rate[k] / rate[0] if rate[0] else 0.0
    if ratio < 1 + thresholds["min_gain"]:
        return _outcome(False, k, "policy.min_gain", rate, enough, [0, k], k)
    if thresholds["adapt"] and thresholds.get("paired"):
        return _paired_move(k, enough, thresholds)
    if thresholds["adapt"]:
        best = max(in_range, key=lambda kk: rate[kk], default=k)
        if best != k and rate[best] >= rate[k] * (1 + thresholds.get("k_gain", thresholds["min_gain"])):
            return _outcome(True, best, "draft_len", rate, enough, sorted({0, k, *in_range}), best)
    return None


def _paired_move(k: int, enough: dict[int, list[Row]], thresholds: dict[str, float]) -> Outcome | None:
    """The other k in range that beats k by k_gain over the same text (same_text), best first."""
    gains: dict[int, tuple[float, float, float]] = {}
    for kk, theirs in enough.items():
        if kk in (0, k) or not thresholds["k_min"] <= kk <= thresholds["k_max"]:
            continue
        shared, mine = same_text(theirs, enough[k], k, thresholds)
        if len(shared) >= thresholds["min_rounds"] and len(mine) >= thresholds["min_rounds"]:
            rate_kk, rate_k = goodput(shared), goodput(mine)
            gains[kk] = (rate_kk / rate_k, rate_kk, rate_k)
    best = max(gains, key=lambda kk: gains[kk][0], default=None)
    if best is None or gains[best][0] < 1 + thresholds["k_gain"]:
        return None
    rate = {kk: goodput(rr) for kk, rr in enough.items() if kk in (0, k, best)}
    outcome = _outcome(True, best, "draft_len", rate, enough, [0, k, best], best)
    outcome.inputs.update(
        {f"paired_goodput_k{best}": gains[best][1], f"paired_goodput_k{k}": gains[best][2], "ratio": gains[best][0]}
    )
    return outcome


def same_text(theirs: list[Row], mine: list[Row], k: int, thresholds: dict[str, float]) -> tuple[list[Row], list[Row]]:
    """Another k's rounds and k's own, as a move compares them: over the prompts where both ran;
    with `adjacent`, each of theirs whose next round in its prompt run was at k, paired with that
    round (a probe alternates the two), so every pair decoded the same stretch of text. With
    `capped` as well, only the pairs where either round drafted as far as the shorter k: a proposal
    depends on k only through the cap (the n-gram drafter stops where its match, a padded verify
    pass, agreement or the context ends; a model drafter always drafts k, so every pair is kept), so a pair of shorter
    drafts ran as it would have at either k, and its two rounds differ only by their text (a
    probe's first round, right after the prompt, drafts nothing; its partner then finds a short
    match that fails: such pairs tilted moves to the probe).
    A repeated prompt id (bench --repeat) is one prompt here: a pair could straddle two runs only
    if a window kept a probe's last round but not the round after it, and the next run's rounds
    before that index all ran at a third k."""
    if not thresholds.get("adjacent"):
        both_ran = {r.prompt_id for r in theirs} & {r.prompt_id for r in mine}
        return [r for r in theirs if r.prompt_id in both_ran], [r for r in mine if r.prompt_id in both_ran]
    prompts, capped = {r.prompt_id for r in theirs}, thresholds.get("capped")
    last: dict[str, Row] = {}  # prompt -> its latest round of either k, in round order
    paired_theirs, paired_mine = [], []
    for row in sorted(theirs + [r for r in mine if r.prompt_id in prompts], key=ROUND_ID):
        before = last.get(row.prompt_id)
        if before is not None and row.draft_len == k and before.draft_len != k and row.index == before.index + 1:
            if not capped or max(before.proposed, row.proposed) >= min(before.draft_len, k):
                paired_theirs.append(before)
                paired_mine.append(row)
        last[row.prompt_id] = row
    return paired_theirs, paired_mine


def optimistic_goodput(k: int, rows: Sequence[Row]) -> float:
    """Goodput at k were the next OPTIMISM rounds, at these rounds' mean cost, to accept every
    draft token: a few unlucky rounds cannot push this below plain, a weak drafter soon does."""
    ms = sum(r.round_ms for r in rows)
    extra = OPTIMISM * ms / len(rows)
    return (sum(r.emitted for r in rows) + OPTIMISM * (k + 1)) / (ms + extra) if ms > 0 else 0.0


def can_still_pay(k: int, spec: Sequence[Row], plain: Sequence[Row], min_gain: float) -> bool:
    """The early-off test, passed: k's optimistic goodput reaches plain's by min_gain."""
    return optimistic_goodput(k, spec) >= goodput(plain) * (1 + min_gain)


def _early_off(k: int, plain: list[Row], spec: list[Row], thresholds: dict[str, float]) -> Outcome | None:
    """Off before min_rounds rounds at k when even an optimistic estimate loses (early_rounds);
    logs from before it used a plain ratio below early_off at plain_rounds rounds."""
    rate = {0: goodput(plain), k: goodput(spec)}
    if not rate[0]:
        return None
    if "early_rounds" in thresholds:
        if len(spec) < thresholds["early_rounds"]:
            return None
        if can_still_pay(k, spec, plain, thresholds["min_gain"]):
            return None
        hope = optimistic_goodput(k, spec)
        outcome = _outcome(False, k, "policy.min_gain", rate, {0: plain, k: spec}, [0, k], k)
        outcome.inputs[f"optimistic_k{k}"] = hope
        outcome.inputs["ratio"] = hope / rate[0]
        return outcome
    legacy_rounds = thresholds.get("plain_rounds", thresholds["min_rounds"])
    if len(spec) >= legacy_rounds and rate[k] / rate[0] < thresholds.get("early_off", 0.0):
        return _outcome(False, k, "policy.min_gain", rate, {0: plain, k: spec}, [0, k], k)
    return None


def _outcome(
    speculate: bool,
    k: int,
    rule: str,
    rate: dict[int, float],
    enough: dict[int, list[Row]],
    used: list[int],
    ratio_k: int,
) -> Outcome:
    inputs = {f"goodput_k{kk}": rate[kk] for kk in used}
    inputs["ratio"] = rate[ratio_k] / rate[0] if rate[0] else 0.0
    return Outcome(speculate, k, rule, inputs, sorted({r.round_id for kk in used for r in enough[kk]}))


# -- intervals (policy.interval) and one prompt's own evidence (policy.prompt_rounds) ----------


def totals(rows: Sequence[Row]) -> PromptTotals:
    """Σ emitted and Σ round ms per prompt: the unit the interval resamples."""
    emitted: dict[str, int] = {}
    ms: dict[str, float] = {}
    for prompt_id, run in groupby(rows, key=PROMPT_ID):  # a prompt's rounds mostly come in one run
        run = list(run)
        emitted[prompt_id] = sum(map(EMITTED, run), emitted.get(prompt_id, 0))
        ms[prompt_id] = sum(map(ROUND_MS, run), ms.get(prompt_id, 0.0))  # in round order, live and in explain
    return PromptTotals(emitted, ms)


def estimate(
    spec: Sequence[Row], base: Sequence[Row], need: float = 0.0, below: float = math.inf
) -> SpeedupEstimate | None:
    """goodput(spec) / goodput(base) with its seeded 95% interval over prompts, as the TUI shows it;
    None, without drawing the interval, when the ratio itself is below `need` or not below `below`:
    a switch on or a move needs the ratio past its line, an off a ratio short of the switch-on line
    (an interval lies around its ratio), so drawing 2000 resamples each check would be work for nothing."""
    spec_totals, base_totals = totals(spec), totals(base)
    ratio = point_ratio(spec_totals, base_totals) or 0.0
    if ratio < need or ratio >= below:
        return None
    return speedup_estimate(spec_totals, base_totals, seed=0)


def _sides(est: SpeedupEstimate, spec: Sequence[Row], base: Sequence[Row], spec_k: int, base_k: int) -> dict:
    """What a decision shows of its figure: the ratio, its interval and the counts on each side."""
    return {
        "ratio": est.ratio or 0.0,
        "low": est.low if est.low is not None else 0.0,
        "high": est.high if est.high is not None else 0.0,
        "rounds_spec": float(len(spec)),
        "rounds_base": float(len(base)),
        "prompts_spec": float(est.prompts_spec),
        "prompts_base": float(est.prompts_plain),
        "spec_k": float(spec_k),
        "base_k": float(base_k),
    }


def _decide_interval(speculate: bool, k: int, rows: list[Row], thresholds: dict[str, float]) -> Outcome | None:
    return decide_grouped(speculate, k, by_draft_len(sorted(rows, key=ROUND_ID), thresholds), thresholds)


def decide_grouped(speculate: bool, k: int, by_k: dict[int, list[Row]], thresholds: dict[str, float]) -> Outcome | None:
    """decide() under policy.interval, on rows already grouped as by_draft_len groups them in round
    order (the same sums, live or from a log): the engine keeps them so, sparing a sort each check."""
    enough = {
        kk: rr
        for kk, rr in by_k.items()
        if len(rr) >= (thresholds["plain_rounds"] if kk == 0 else thresholds["min_rounds"])
    }
    if 0 not in enough:
        return None
    plain, gain, margin = enough[0], 1 + thresholds["min_gain"], 1 + thresholds["min_gain"] + thresholds["hysteresis"]
    switching = _switch_evidence(by_k, thresholds)
    if not speculate:
        candidates = [kk for kk in sorted(switching) if thresholds["k_min"] <= kk <= thresholds["k_max"]]
        wins = {}
        for kk in candidates if thresholds["adapt"] else [kk for kk in candidates if kk == k]:
            est = estimate(switching[kk], plain, need=margin)
            if est is not None and est.low is not None and est.low >= gain and est.ratio >= margin:
                wins[kk] = est
        best = max(wins, key=lambda kk: wins[kk].ratio, default=None)
        if best is None:
            return None
        return _interval_outcome(
            True, best, "policy.hysteresis", wins[best], {0: plain, best: switching[best]}, best, 0
        )
    if k in switching:
        est = estimate(switching[k], plain, below=margin)
        if est is not None and est.high is not None and est.high < gain:
            return _interval_outcome(False, k, "policy.min_gain", est, {0: plain, k: switching[k]}, k, 0)
    if not thresholds["adapt"] or k not in enough:
        return None
    in_range = [kk for kk in sorted(enough) if kk and thresholds["k_min"] <= kk <= thresholds["k_max"]]
    moves = {}
    for kk in in_range:
        if kk == k:
            continue
        theirs, mine = same_text(enough[kk], enough[k], k, thresholds)
        if len(theirs) < thresholds["min_rounds"] or len(mine) < thresholds["min_rounds"]:
            continue
        paired = estimate(theirs, mine, need=1 + thresholds["k_gain"])
        if (
            paired is not None
            and paired.low is not None
            and paired.low > 1.0
            and paired.ratio >= 1 + thresholds["k_gain"]
        ):
            moves[kk] = (paired, theirs, mine)
    best = max(moves, key=lambda kk: moves[kk][0].ratio, default=None)
    if best is None:
        return None
    paired, theirs, mine = moves[best]
    rate = {kk: goodput(enough[kk]) for kk in (0, k, best)}
    inputs = {f"goodput_k{kk}": v for kk, v in rate.items()}
    inputs.update(_sides(paired, theirs, mine, best, k))
    inputs["ratio_to_plain"] = rate[best] / rate[0] if rate[0] else 0.0
    ids = sorted({r.round_id for kk in (0, k, best) for r in enough[kk]})
    return Outcome(True, best, "draft_len", inputs, ids)


def switch_rows(rows: Sequence[Row], drafted: bool) -> list[Row]:
    """One k's rounds as a switch on or off judges them: with `drafted` only those that drafted."""
    return [r for r in rows if r.proposed] if drafted else list(rows)


def _switch_evidence(by_k: dict[int, list[Row]], thresholds: dict[str, float]) -> dict[int, list[Row]]:
    """Each k's rounds that a switch on or off judges, where there are min_rounds of them: all of
    them; with silent_plain only those that drafted (a silent round costs what plain does, so it
    speaks for neither side; counting it would pull every ratio toward 1, and a class whose drafts
    are rare but pay would look like one that does not pay)."""
    drafted = bool(thresholds.get("silent_plain") and thresholds.get("switch_drafted"))  # logs before it: all rounds
    switching = {kk: switch_rows(rr, drafted) for kk, rr in by_k.items() if kk}
    return {kk: rr for kk, rr in switching.items() if len(rr) >= thresholds["min_rounds"]}


def _interval_outcome(
    speculate: bool, k: int, rule: str, est: SpeedupEstimate, enough: dict[int, list[Row]], spec_k: int, base_k: int
) -> Outcome:
    spec, base = enough[spec_k], enough[base_k]
    inputs = {f"goodput_k{base_k}": goodput(base), f"goodput_k{spec_k}": goodput(spec)}
    inputs.update(_sides(est, spec, base, spec_k, base_k))
    return Outcome(speculate, k, rule, inputs, sorted({r.round_id for r in [*spec, *base]}))


def decide_prompt(speculate: bool, k: int, rows: list[Row], thresholds: dict[str, float]) -> Outcome | None:
    """One prompt's own first rounds that drafted, against the class's plain rounds: off for the
    rest of the prompt if they do not pay; on if they pay by the switch-on margin."""
    spec = sorted((r for r in rows if r.draft_len and r.proposed), key=lambda r: r.round_id)
    plain = sorted(by_draft_len(rows, thresholds).get(0, []), key=lambda r: r.round_id)
    if len(spec) < thresholds["prompt_rounds"] or len(plain) < thresholds["plain_rounds"] or not goodput(plain):
        return None
    drafted = spec[0].draft_len
    rate = {0: goodput(plain), drafted: goodput(spec)}
    if speculate:  # off below prompt_off (silent_plain: drafts that lose), else below 1 + min_gain
        line = thresholds.get("prompt_off", 1 + thresholds["min_gain"])
    else:
        line = 1 + thresholds["min_gain"] + thresholds["hysteresis"]
    if (rate[drafted] >= rate[0] * line) == speculate:
        return None  # on and paying, or off and not paying by the switch-on margin
    inputs = {"goodput_k0": rate[0], f"goodput_k{drafted}": rate[drafted]}
    inputs.update(_sides(estimate(spec, plain), spec, plain, drafted, 0))  # the interval, only for a decision
    return Outcome(not speculate, k, "policy.prompt_rounds", inputs, sorted({r.round_id for r in [*spec, *plain]}))


# -- the n-gram drafter's min_match (classes[i].ngram.max_match) ---------------------------


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
