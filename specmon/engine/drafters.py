"""Drafters propose up to k tokens per round behind one small interface.

The n-gram prompt-lookup drafter needs no model and lives here. Model-based drafters (layer-skip
self-draft, a separate draft model) run torch or an engine, so they live in the backends, on
CachedDrafter's draft loop: after a round the context may have diverged from what the draft cache
was fed (a rejected draft token) or run past it (all k accepted: the last draft token was never fed,
and the bonus token is new), so each round rolls the cache back to the shared prefix, feeds the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import numpy as np

from specmon.engine.sampling import probs_from_logits, sample
from specmon.events.schema import Sampling


@dataclass
class Proposal:
    tokens: list[int]
    q: np.ndarray | None  # draft distributions [len(tokens), V]; None means one-hot (no model)
    matched: int = 0  # a confident n-gram draft: how many context tokens its match spans; 0 otherwise
    explored: bool = False  # a draft the policy's table cut, verified to learn (policy/explore.py)
    cut: list[int] = field(default_factory=list)  # a draft the policy's table cut whole (policy.gate.Shadow)


class Drafter(Protocol):
    name: str

    def begin(self, prompt: Sequence[int]) -> None:
        """Forget any previous prompt's state."""

    def propose(self, context: Sequence[int], k: int, sampling: Sampling, rng: np.random.Generator) -> Proposal:
        """Up to k draft tokens that continue `context` (prompt plus tokens emitted so far)."""


class NoDrafter:
    """Plain decoding: proposes nothing, so every round is one target step."""

    name = "none"

    def begin(self, prompt: Sequence[int]) -> None:
        pass

    def fork(self) -> NoDrafter:
        return self  # nothing to keep apart

    def propose(self, context, k, sampling, rng) -> Proposal:
        return Proposal([], None)


class NgramDrafter:
    """Prompt lookup: copy what followed the latest earlier occurrence of the last n tokens, for each n
    in `ngram_sizes` (longest first). Costs microseconds; q is one-hot.

    With `confident(...)` (a policy sets it per prompt class) it proposes only on a confident match
    (see confident_draft), because on a CPU a failed proposal costs a verify pass of 1.2-2.9x a plain step.
    """

    name = "ngram"

    def __init__(self, ngram_sizes: Sequence[int] = (3, 2), verify_rows: VerifyRows | None = None):
        self.ngram_sizes = sorted(ngram_sizes, reverse=True)
        self.verify_rows = verify_rows
        self.index = ContextIndex()
        self.confident()  # the plain lookup above until a policy sets the test

    def confident(self, min_match: int = 0, min_seen: int = 1, whole: bool = False) -> None:
        """Set (min_match >= 1) or clear (0) the confidence test for the prompts that follow;
        `whole`: draft up to k after any such match (a policy then cuts each draft by its match)."""
        self.min_match, self.min_seen, self.whole = max(0, min_match), max(1, min_seen), whole

    def begin(self, prompt: Sequence[int]) -> None:
        self.index = ContextIndex()

    def fork(self) -> NgramDrafter:
        """An independent drafter with the same settings (and its own context index)."""
        twin = NgramDrafter(self.ngram_sizes, self.verify_rows)
        twin.confident(self.min_match, self.min_seen, self.whole)
        return twin

    def propose(self, context, k, sampling, rng) -> Proposal:
        if k <= 0:
            return Proposal([], None)
        positions = self.index.update(context)
        if self.min_match:
            rows = (lambda n, start: k + 1) if self.whole else self.verify_rows
            tokens, matched = confident_draft(context, k, self.min_match, self.min_seen, positions, rows)
            return Proposal(tokens, None, matched)
        matches = _match_lengths(context, positions, longest=self.ngram_sizes[0])
        for n in self.ngram_sizes:  # the latest occurrence of the last n tokens, longest n first
            start = max((i for i, length in matches if length >= n), default=None)
            if start is not None:
                return Proposal([int(token) for token in context[start : start + k]], None)
        return Proposal([], None)


MAX_MATCH = 16  # a suffix match this long is as confident as a match gets

# rows a target's pass over n positions starting at `start` computes (>= n): what verifying costs
VerifyRows = Callable[[int, int], int]


class ContextIndex:
    """Where each token occurs in one prompt's context, kept from round to round as the round loop's list
    grows, so a lookup costs its few candidates, not a pass over the context (~1% of a llama.cpp step).
    Another list object, or one that shrank or changed, starts it afresh."""

    def __init__(self):
        self.n = 0
        self.last = None  # context[n - 1] when last seen: a list changed in place starts afresh
        self.where: dict[int, list[int]] = {}
        self.source: Sequence[int] | None = None  # the round loop's context list, extended in place

    def update(self, context: Sequence[int]) -> list[int] | None:
        """Each earlier position i with context[i - 1] == context[-1] (1 <= i <= n - 1); None for a list
        seen the first time (search it whole), so a caller that passes a new list every time pays nothing."""
        n, seen = len(context), context is self.source
        if not seen or n < self.n or (self.n and context[self.n - 1] != self.last):
            self.__init__()  # a new list, or one changed other than by growing: index it afresh
            self.source = context
            if not seen:
                return None
        where = self.where
        for position in range(self.n, n):
            where.setdefault(context[position], []).append(position)
        self.n = n
        if not n:
            return []
        self.last = context[n - 1]
        return [i + 1 for i in where[self.last][:-1]]  # its own position is the last


def confident_draft(
    ctx: Sequence[int],
    k: int,
    min_match: int,
    min_seen: int,
    positions: Sequence[int] | None = None,
    verify_rows: VerifyRows | None = None,
) -> tuple[list[int], int]:
    """Up to k tokens copied after the longest (then latest) earlier match of the context's end, if it is at
    least min_match long and its next token followed >= min_seen such matches, and the match's length (0:
    no draft). It drafts no further than the match is long unless the verify pass computes more rows anyway
    (`verify_rows`: a padded pass costs the same however many rows are draft), nor past where the agreeing
    occurrences stop agreeing. `positions`: the candidates _match_lengths would find (a ContextIndex's)."""
    matches = [(i, length) for i, length in _match_lengths(ctx, positions) if length >= min_match]
    if not matches:
        return [], 0
    length = max(length for _, length in matches)
    chosen = max(i for i, found in matches if found == length)  # the latest of the longest
    agree = [i for i, _ in matches if ctx[i] == ctx[chosen]]
    if len(agree) < min_seen:
        return [], 0
    n, reach = len(ctx), length
    if verify_rows is not None:  # rows the pass computes anyway are free to fill with draft
        reach = max(length, verify_rows(min(k, length) + 1, n - 1) - 1)
    room = min(k, reach, n - chosen)
    if min_seen > 1:  # stop where fewer than min_seen of the agreeing occurrences still agree
        for step in range(1, room):
            if sum(1 for i in agree if i + step < n and ctx[i + step] == ctx[chosen + step]) < min_seen:
                room = step
                break
    return [int(token) for token in ctx[chosen : chosen + room]], length


def _match_lengths(
    ctx: Sequence[int], positions: Sequence[int] | None = None, longest: int = MAX_MATCH
) -> list[tuple[int, int]]:
    """For each earlier position i whose preceding tokens match the context's last tokens (at
    least one), (i, how many match, up to `longest`): ctx[i] is then a candidate next token."""
    n = len(ctx)
    if n < 2:
        return []
    if positions is None:
        last = ctx[-1]
        positions = [i + 1 for i in range(n - 1) if ctx[i] == last]
    found = []
    for i in positions:
        length = 1
        while length < longest and i - 1 - length >= 0 and ctx[i - 1 - length] == ctx[n - 1 - length]:
            length += 1
        found.append((i, length))
    return found


class CachedDrafter:
    """A drafter that runs a model on a cache of its own: `_plan`, then k one-token forwards (`_step`) a round."""

    def __init__(self) -> None:
        self.fed: list[int] = []  # tokens whose keys/values sit in the draft cache, in order

    def begin(self, prompt: Sequence[int]) -> None:
        self.fed = []

    def _plan(self, context: Sequence[int]) -> tuple[int, list[int]]:
        """(positions to keep, tokens to feed); the last token is always fed, so its logits are fresh."""
        valid = 0
        limit = min(len(self.fed), len(context) - 1)
        while valid < limit and self.fed[valid] == context[valid]:
            valid += 1
        self.fed = list(context[:valid])
        return valid, list(context[valid:])

    def _step(self, tokens: list[int], start: int) -> np.ndarray:
        """Write `tokens` at positions start... of the cache; the last one's logits [1, vocab]."""
        raise NotImplementedError

    def propose(self, context: Sequence[int], k: int, sampling: Sampling, rng: np.random.Generator) -> Proposal:
        if k <= 0:
            return Proposal([], None)
        start, pending = self._plan(context)
        tokens: list[int] = []
        rows: list[np.ndarray] = []
        for _ in range(k):
            logits = self._step(pending, start)
            start += len(pending)
            self.fed.extend(pending)
            if sampling.greedy:  # q one-hot: no row
                token = int(logits[0].argmax())
            else:
                rows.append(probs_from_logits(logits, sampling)[0])
                token = sample(rows[-1], rng)
            tokens.append(token)
            pending = [token]
        return Proposal(tokens, np.stack(rows) if rows else None)
