"""The decision rule, as pure functions of the evidence and the engine's measured costs, so a log
re-derives every decision.

A draft of j tokens is worth verifying when its expected emitted tokens per plain step of cost
beat a plain step's one token:

    G(j) = (1 + sum_{i=1..j} P(the first i tokens are accepted)) / steps(j)        G(0) = 1

steps(j) is the round's cost in plain steps from the curve measured at load (engine.costs).
P comes from acceptance by reach: a confident n-gram draft copies what followed a match of m
context tokens, and its i-th token, once the i-1 before it were accepted, continues a match of
m + i - 1 tokens; a model drafter's i-th token has reach i - 1. So one rate per reach bucket,
learned from every drafted position, prices a draft of any length after a match of any length:

    P(first i accepted) = prod_{l=1..i} a(bucket(m + l - 1))

a(b) for a class is its own accepted / tried at that reach, shrunk toward the session's (all
classes) by SHARED_WEIGHT positions, which is shrunk toward PRIOR by PRIOR_WEIGHT: a class
starts from what the session has seen, and its own evidence takes over as it comes. Before any
round, the table is this rule on the prior alone, so the engine's curve decides the start: where
each verified position costs half a plain step (a CPU), a model drafter's 1 + 1/2 tokens do not
pay and its class starts plain; where a position costs 0.05 (a GPU's flat pass), it drafts.

For each match length m and proposal length n, the round verifies the j <= n with the best
G(j), or nothing (a plain step) unless some j beats G(0) by min_gain. That table is the class's
decision; it is recomputed every CHECK_EVERY drafting rounds of the class."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, Sequence

if TYPE_CHECKING:
    from specmon.events.schema import Recall

MAX_REACH = 16  # the n-gram drafter's longest match (drafters.MAX_MATCH): reach is capped here
PRIOR_WEIGHT = 4.0  # the prior below is worth this many drafted positions
SHARED_WEIGHT = 8.0  # the session's rate at a reach is worth this many of a class's own positions
# an n-gram draft needs a match of 2 tokens or more, as the plain lookup's: drafts after 1-token
# matches lost 6-9% on torch's test half (real runs), more than the rates above foresaw
MIN_MATCH = 2
# positions per reach bucket that evidence stored by earlier sessions (memory.store) may stand for,
# at its age's weight, less the class's own fresh positions there: it opens a class's first table and
# gives way to the session's own rounds as they come (a bucket's 32 fresh positions replace it)
STORED_CAP = 32.0
CHECK_EVERY = 4  # drafts (verified, or cut and settled) between recomputing the tables (a 64-token prompt has ~10)


def bucket(reach: int) -> int:
    """Reach (tokens of match a position continues) to its rate's bucket: 0-4 alone, then 5-6,
    7-9 and 10 or more, where positions are fewer and rates flatter."""
    return reach if reach <= 4 else 5 if reach <= 6 else 6 if reach <= 9 else 7


BUCKETS = bucket(MAX_REACH) + 1
BUCKET_OF = tuple(bucket(reach) for reach in range(MAX_REACH + 1))  # bucket() as a lookup, for the per-position loops
REACH = (0, 1, 2, 3, 4, 5, 7, 10)  # each bucket's least reach
# acceptance before any evidence: a match that has run r tokens runs on with odds (r + 1) / (r + 3),
# the rule of succession with one failure more: rising with reach, as copies do, from a third
# (chosen on the tuning half over (r + 1) / (r + 2) and r / (r + 2), on four engines' cost curves)
PRIOR = tuple((r + 1) / (r + 3) for r in REACH)
# a model drafter's position i (reach i - 1) starts at the plain rule of succession, i / (i + 1): a
# draft model agrees with its target far more often than a one-token match continues
PRIOR_POSITIONAL = tuple((r + 1) / (r + 2) for r in REACH)


class Draft(NamedTuple):
    """What one drafting round tells: a tuple, built once a round inside the decode loop."""

    round_id: int
    prompt_class: str
    proposed: int
    accepted: int
    matched: int  # the n-gram match's length; 0 for a model drafter

    @classmethod
    def of(cls, ev) -> Draft:
        return cls(ev.round_id, ev.prompt_class, len(ev.proposed), ev.accepted, ev.matched)


@dataclass
class Counts:
    """Positions tried and accepted per reach bucket."""

    tried: list = field(default_factory=lambda: [0] * BUCKETS)
    taken: list = field(default_factory=lambda: [0] * BUCKETS)

    def add(self, draft: Draft, sign: int = 1) -> None:
        """Each drafted position up to the first rejection: accepted, or the one rejected."""
        seen = min(draft.accepted + 1, draft.proposed)
        start = draft.matched - 1 if draft.matched else -1
        for position in range(1, seen + 1):
            b = BUCKET_OF[min(start + position, MAX_REACH)]
            self.tried[b] += sign
            self.taken[b] += sign * (position <= draft.accepted)

    def plus(self, tried: Sequence[float], taken: Sequence[float]) -> Counts:
        """These counts with more positions added (stored evidence: fractional counts)."""
        return Counts([a + b for a, b in zip(self.tried, tried)], [a + b for a, b in zip(self.taken, taken)])


@dataclass
class Shadow:
    """A draft the class's table cut whole, checked against what the target emits instead. A plain
    step emits the token a verify pass would have accepted there (greedy: the same, up to near ties
    between a one-row and a many-row pass; sampled: a one-hot draft's token is accepted with its
    probability, the chance a plain step emits it), so a cut draft is evidence at no cost, and a
    class whose table is cut still learns when its prompts start to copy. One per prompt at a time,
    as a drafting run would go, and a verified draft takes over the positions it had not reached:
    no position counts twice."""

    round_id: int
    prompt_class: str
    tokens: Sequence[int]
    matched: int
    accepted: int = 0

    def take(self, emitted: Sequence[int]) -> Draft | None:
        """The draft as a verify pass would have judged it, once the tokens emitted so far settle it."""
        for token in emitted:
            if token != self.tokens[self.accepted]:
                break
            self.accepted += 1
            if self.accepted == len(self.tokens):
                break
        else:
            return None
        return Draft(self.round_id, self.prompt_class, len(self.tokens), self.accepted, self.matched)


@dataclass
class Shadows:
    """Each prompt's shadow draft (Shadow) while it is checked: the rounds of a prompt, in order,
    settle it. The scheduler holds one per decode, `policy explain` one per log."""

    pending: dict[str, Shadow] = field(default_factory=dict)

    def settle(self, ev) -> Draft | None:
        """A round (events.RoundVerified): the draft its prompt's shadow comes to, once settled."""
        shadow = self.pending.get(ev.prompt_id)
        if shadow is not None and ev.proposed:  # a verified draft judges the positions from here itself
            return self.close(ev.prompt_id)
        if shadow is None and ev.cut:
            shadow = self.pending[ev.prompt_id] = Shadow(ev.round_id, ev.prompt_class, ev.cut, ev.matched)
        if shadow is None:
            return None
        settled = shadow.take(ev.emitted)
        if settled is not None:
            del self.pending[ev.prompt_id]
        return settled

    def close(self, prompt_id: str) -> Draft | None:
        """The prompt finished (or a verified draft took over): what its shadow had matched counts;
        dropping it would leave out only the shadows still succeeding and bias the rates down."""
        shadow = self.pending.pop(prompt_id, None)
        if shadow is None or not shadow.accepted:
            return None
        # the positions judged so far, all accepted (the rest never were)
        return Draft(shadow.round_id, shadow.prompt_class, shadow.accepted, shadow.accepted, shadow.matched)

    def drop(self, prompt_id: str) -> None:
        """A prompt starts: a shadow of a decode that never finished (it raised) is no evidence."""
        self.pending.pop(prompt_id, None)


def counts_of(drafts: Sequence[Draft]) -> Counts:
    counts = Counts()
    for draft in drafts:
        counts.add(draft)
    return counts


def top_up(
    stored_tried: Sequence[float], stored_taken: Sequence[float], own: Counts, weight: float
) -> tuple[list[float], list[float]]:
    """Stored positions a class takes per bucket: STORED_CAP * `weight` less its own, at the stored rate."""
    tried = [min(stored, max(0.0, STORED_CAP * weight - mine)) for stored, mine in zip(stored_tried, own.tried)]
    return tried, [taken * n / stored if stored else 0.0 for taken, n, stored in zip(stored_taken, tried, stored_tried)]


def rates(
    own: Counts,
    session: Counts,
    prior: Sequence[float],
    recall: Recall | None = None,
    prior_weight: float = PRIOR_WEIGHT,
    shared_weight: float = SHARED_WEIGHT,
) -> list[float]:
    """a(b) per bucket: the class's own, shrunk toward the session's, shrunk toward the prior; each
    with what a `recall` (events.Recall) lends it from the store (a log's decision brings the
    constants it was decided with, and its recall)."""
    if recall:
        own, session = own.plus(recall.tried, recall.taken), session.plus(recall.pool_tried, recall.pool_taken)
    shared = [(session.taken[b] + prior[b] * prior_weight) / (session.tried[b] + prior_weight) for b in range(BUCKETS)]
    return [(own.taken[b] + shared_weight * shared[b]) / (own.tried[b] + shared_weight) for b in range(BUCKETS)]


def goodputs(rate: Sequence[float], steps: Sequence[float], matched: int) -> list[float]:
    """G(j) for j = 0..k after a match of `matched` tokens (0: a model drafter), from the round costs `steps`."""
    out, survive, expected = [1.0], 1.0, 1.0
    start = matched - 1 if matched else -1
    for j in range(1, len(steps)):
        survive *= rate[BUCKET_OF[min(start + j, MAX_REACH)]]
        expected += survive
        out.append(expected / steps[j])
    return out


Table = tuple[tuple[int, ...], ...]  # table[m][n]: tokens verified of an n-token draft after a match of m


def cut_table(rate: Sequence[float], steps: Sequence[float], min_gain: float) -> Table:
    rows: list[tuple[int, ...]] = []
    for matched in range(MAX_REACH + 1):
        if matched > REACH[-1]:  # every position of a longer match is in the last bucket: the same row
            rows.append(rows[-1])
            continue
        g = goodputs(rate, steps, matched)
        best, row = 0, [0]
        for n in range(1, len(steps)):
            if g[n] > g[best] and g[n] >= 1 + min_gain:
                best = n
            row.append(best)
        rows.append(tuple(row))
    return tuple(rows)


def summary(table: Table, positional: bool = False, min_match: int = MIN_MATCH) -> tuple[bool, int, int]:
    """(speculate, k, from_match) for events and views: whether any draft is verified, the
    longest one, and the shortest match that drafts (0: none); the n-gram drafter proposes after
    MIN_MATCH tokens or more. A `positional` drafter (a model) reports no match: only row 0 counts."""
    if positional:
        return table[0][-1] > 0, table[0][-1], 0
    longest = max(row[-1] for row in table[min_match:])
    first = next((m for m in range(min_match, len(table)) if table[m][-1]), 0)
    return longest > 0, longest, first


def kept(table: Table) -> list[int]:
    """Tokens a whole draft keeps after each match length: what a decision changes, for events."""
    return [row[-1] for row in table]


def changes(before: Sequence[int], after: Sequence[int]) -> str:
    """What a new table changes, for people, from kept() before and after."""
    moved = [f"{m}: {b}->{a}" for m, (b, a) in enumerate(zip(before, after)) if b != a]
    if not moved:
        return "only where the drafter proposed fewer than k tokens"
    return "verified of a whole draft after a match of " + ", ".join(moved[:4]) + (" ..." if len(moved) > 4 else "")
