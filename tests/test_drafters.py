"""The n-gram drafter's confidence test: it proposes only on a confident match and drafts no
further than the match supports; without one set, it is the plain lookup it always was."""

import numpy as np
from hypothesis import given, settings, strategies as st

from specmon.engine.drafters import NgramDrafter, confident_draft as _confident_draft
from specmon.events.schema import Sampling
from specmon.policy.features import prompt_features

RNG = np.random.default_rng(0)


def confident_draft(*args, **kwargs):
    return _confident_draft(*args, **kwargs)[0]  # the draft; its match length is tested on its own


def propose(drafter, context, k):
    return drafter.propose(context, k, Sampling(), RNG).tokens


def test_a_match_shorter_than_min_match_proposes_nothing():
    ctx = [5, 1, 2, 3, 4, 9, 9, 1, 2, 3]  # the last 3 tokens occurred before, once, followed by 4 9 9
    assert confident_draft(np.array(ctx), 5, 3, 1) == [4, 9, 9]  # a 3-token match drafts at most 3
    assert confident_draft(np.array(ctx), 5, 4, 1) == []  # a 4th token (5 vs 9) does not match
    assert confident_draft(np.array(ctx), 5, 3, 2) == []  # seen once, not twice
    assert confident_draft(np.array(ctx), 2, 1, 1) == [4, 9]  # never past k


def test_min_seen_stops_the_draft_where_the_earlier_occurrences_part():
    ctx = np.array([1, 2, 3, 4, 7, 1, 2, 3, 4, 8, 1, 2, 3])  # "1 2 3" was followed by "4 7" and "4 8"
    assert confident_draft(ctx, 5, 3, 1) == [4, 8, 1]  # the latest occurrence, as far as the match is long
    assert confident_draft(ctx, 5, 3, 2) == [4]  # both saw 4; after it they part


def test_the_longest_match_wins_over_a_later_shorter_one():
    ctx = np.array([9, 1, 2, 3, 4, 5, 6, 7, 8, 0, 2, 3, 6, 0, 9, 1, 2, 3])
    # "9 1 2 3" matches 4 tokens at the start; "2 3" later matches only 2
    assert confident_draft(ctx, 3, 2, 1) == [4, 5, 6]


def test_without_a_confidence_setting_it_is_the_plain_lookup():
    plain, tuned = NgramDrafter((3, 2)), NgramDrafter((3, 2))
    tuned.confident(3, 1)
    tuned.confident(0)  # cleared again
    ctx = [7, 8, 1, 2, 6, 6, 6, 1, 2]
    assert propose(plain, ctx, 4) == propose(tuned, ctx, 4) == [6, 6, 6, 1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=60), st.integers(1, 8), st.integers(1, 6), st.integers(1, 3))
def test_a_confident_draft_copies_a_real_continuation_no_longer_than_its_match(ctx, k, min_match, min_seen):
    arr = np.array(ctx)
    draft = confident_draft(arr, k, min_match, min_seen)
    assert len(draft) <= k
    if draft:
        # some earlier place holds the context's last min_match tokens followed by the draft
        n = len(ctx)
        found = [
            i
            for i in range(min_match, n)
            if ctx[i - min_match : i] == ctx[n - min_match :] and ctx[i : i + len(draft)] == draft
        ]
        assert found
        longest = max(sum(1 for _ in iter_match(ctx, i)) for i in found)
        assert len(draft) <= max(longest, min_match)


def iter_match(ctx, i):
    """Tokens before position i that match the context's end, one by one."""
    n, j = len(ctx), 1
    while i - j >= 0 and j < 16 and ctx[i - j] == ctx[n - j]:
        yield j
        j += 1


def test_prompt_features_see_what_is_given_not_the_words():
    assert prompt_features("Why is the sky blue?").given_share == 0.0
    passage = "Der Stadtrat traf sich am Dienstag. " * 6
    found = prompt_features(f"Fasse zusammen:\n\n{passage}")  # German: no English word needed
    assert found.passage and not found.code and found.given_share > 0.8
    code = prompt_features("Mach das schneller:\n\n```python\ndef f(x):\n    return [i * i for i in x]\n```")
    assert code.code
    data = prompt_features('把它变成表格: [{"a": 1, "b": 2}, {"a": 3, "b": 4}, {"a": 5, "b": 6}]')
    assert data.code


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 5), min_size=1, max_size=40),
    st.lists(st.integers(0, 5), min_size=1, max_size=30),
    st.integers(1, 4),
    st.integers(1, 3),
    st.integers(1, 8),
)
def test_the_drafters_index_proposes_what_a_search_of_the_whole_context_does(prompt, grown, min_match, min_seen, k):
    """Round by round the round loop extends one context list in place; the drafter indexes it as it
    grows, and must propose exactly what confident_draft finds searching the whole context."""
    drafter = NgramDrafter()
    drafter.confident(min_match, min_seen)
    drafter.begin(prompt)
    context = list(prompt)
    for token in [None, *grown]:  # the first round sees the prompt alone
        if token is not None:
            context.append(token)
        whole = confident_draft(np.asarray(context, dtype=np.int64), k, min_match, min_seen)
        assert propose(drafter, context, k) == whole
    other = [*context[:-1], (context[-1] + 1) % 6]  # another list, another context: no stale index
    assert propose(drafter, other, k) == confident_draft(np.asarray(other), k, min_match, min_seen)


def test_a_draft_reports_the_match_it_rests_on():
    ctx = np.array([9, 1, 2, 3, 4, 5, 6, 7, 8, 0, 2, 3, 6, 0, 9, 1, 2, 3])
    assert _confident_draft(ctx, 3, 2, 1) == ([4, 5, 6], 4)  # "9 1 2 3": four tokens, cut to k
    assert _confident_draft(ctx, 3, 5, 1) == ([], 0)
    drafter = NgramDrafter()
    drafter.confident(2, 1)
    proposal = drafter.propose(ctx.tolist(), 8, Sampling(), RNG)
    assert (proposal.tokens, proposal.matched) == ([4, 5, 6, 7], 4)
    drafter.confident(0)
    assert drafter.propose(ctx.tolist(), 8, Sampling(), RNG).matched == 0  # the plain lookup reports none


def padded_to(rows: int, pad_from: int):
    """A packed target's verify_rows: passes of pad_from..rows positions run as rows."""
    return lambda n, start: rows if pad_from <= n <= rows else n


def test_a_padded_verify_pass_lets_a_short_match_draft_on_for_free():
    ctx = np.array([5, 1, 2, 3, 4, 9, 9, 7, 7, 7, 1, 2, 3])  # "1 2 3" matched, followed by 4 9 9 7 7 7 1 2 3
    assert _confident_draft(ctx, 8, 2, 1) == ([4, 9, 9], 3)  # capped at the match's 3
    assert _confident_draft(ctx, 8, 2, 1, verify_rows=padded_to(9, 3)) == ([4, 9, 9, 7, 7, 7, 1, 2], 3)
    assert _confident_draft(ctx, 5, 2, 1, verify_rows=padded_to(9, 3)) == ([4, 9, 9, 7, 7], 3)  # never past k
    # a 4-position pass (3 drafted) runs unpadded below pad_from = 5: no free rows, the cap holds
    assert _confident_draft(ctx, 8, 2, 1, verify_rows=padded_to(9, 5)) == ([4, 9, 9], 3)
    # the context's end stops it: only 5 tokens follow the earlier "1 2 3"
    short = np.array([1, 2, 3, 4, 5, 1, 2, 3])
    assert _confident_draft(short, 8, 2, 1, verify_rows=padded_to(9, 3)) == ([4, 5, 1, 2, 3], 3)
    # the padded rows: a pass of min(k, 3) + 1 = 4 positions runs as 6, so 5 tokens are free
    assert _confident_draft(ctx, 8, 2, 1, verify_rows=padded_to(6, 2)) == ([4, 9, 9, 7, 7], 3)


def test_min_seen_still_stops_an_extended_draft_where_the_occurrences_part():
    ctx = np.array([1, 2, 3, 4, 7, 1, 2, 3, 4, 8, 1, 2, 3])
    assert _confident_draft(ctx, 8, 3, 2, verify_rows=padded_to(9, 2)) == ([4], 3)
    drafter = NgramDrafter(verify_rows=padded_to(9, 2))
    drafter.confident(3, 1)
    twin = drafter.fork()
    assert propose(twin, ctx.tolist(), 8) == [4, 8, 1, 2, 3]  # the fork keeps verify_rows; the context ends it


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=50), st.integers(1, 8))
def test_the_plain_lookup_copies_after_the_latest_occurrence_of_the_longest_suffix(ctx, k):
    """Prompt lookup as in the literature: the last 3 tokens, else the last 2, found at their latest
    earlier place that has a token after it; the draft is what followed there, up to k."""

    def reference():
        for n in (3, 2):
            starts = [s for s in range(len(ctx) - n) if ctx[s : s + n] == ctx[-n:]]
            if starts:
                return ctx[max(starts) + n : max(starts) + n + k]
        return []

    drafter = NgramDrafter((3, 2))
    drafter.begin(ctx)
    assert propose(drafter, list(ctx), k) == reference()  # a new list: searched whole
    context = list(ctx[:1])
    for token in ctx[1:]:  # grown in place: the index
        propose(drafter, context, k)
        context.append(token)
    assert propose(drafter, context, k) == reference()


def test_the_plain_lookup_finds_ngrams_longer_than_a_confident_match_counts():
    ctx = [*range(20), 99, *range(20)]
    assert propose(NgramDrafter((20,)), ctx, 3) == [99, 0, 1]
