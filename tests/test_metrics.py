"""The metric definitions, checked on rounds whose figures are worked out by hand."""

import pytest

from specmon.events.schema import Equivalence, PromptFinished
from specmon.metrics.stats import class_stats, summary
from events import round_verified


def rnd(k, proposed, accepted, emitted, draft=1.0, verify=10.0, overhead=1.0, cls="c", alpha=None):
    rejection = accepted if accepted < proposed else None
    return round_verified(
        prompt_class=cls,
        draft_len=k,
        proposed=list(range(proposed)),
        accepted=accepted,
        rejection_pos=rejection,
        emitted=[9] * emitted,
        draft_ms=draft,
        verify_ms=verify,
        overhead_ms=overhead,
        alpha_hat=alpha,
    )


def finished(k, verdict, cls="c"):
    return PromptFinished(
        session_id="s",
        t=0.0,
        prompt_id="p",
        prompt_class=cls,
        draft_len=k,
        rounds=1,
        generated=[],
        text="",
        stop_reason="eos",
        prefill_ms=0.0,
        decode_ms=0.0,
        equivalence=Equivalence(verdict),
    )


EVENTS = [
    # k = 4: accepted 4 (all), 1, 0, and a round where the drafter had nothing to offer.
    rnd(4, 4, 4, 5, alpha=1.0),
    rnd(4, 4, 1, 2, alpha=0.5),
    rnd(4, 2, 0, 1, alpha=0.0),
    rnd(4, 0, 0, 1),
    # plain decoding: 4 rounds, one token each, 6 ms a round.
    *[rnd(0, 0, 0, 1, draft=0.0, verify=5.0, overhead=1.0) for _ in range(4)],
    finished(4, "identical"),
    finished(0, "baseline"),
]


def test_counts_and_derived_ratios():
    c = class_stats(EVENTS)["c"]
    spec = c.runs[4]
    assert (spec.rounds, spec.empty_rounds, spec.proposed, spec.accepted, spec.emitted) == (4, 1, 10, 5, 9)
    assert spec.acceptance_rate == 0.5  # 5 / 10; the empty round adds to neither sum
    assert spec.mean_accepted_len == 1.25  # 5 / 4 rounds
    # a_i = rounds with accepted > i / rounds with proposed > i
    assert spec.per_position == [2 / 3, 1 / 3, 1 / 2, 1 / 2]
    assert spec.rejections == [1, 1] and spec.all_accepted == 1
    assert spec.alpha_hat == 0.5
    assert spec.goodput == 9 / 48  # 9 emitted over 4 rounds of 12 ms
    assert c.baseline.goodput == 4 / 24
    assert c.speedup(4) == pytest.approx((9 / 48) / (4 / 24))


def test_summary_has_the_documented_json_shape():
    row = summary(class_stats(EVENTS))["classes"]["c"]
    for key in (
        "rounds",
        "proposed",
        "accepted",
        "acceptance_rate",
        "mean_accepted_len",
        "tok_per_s",
        "baseline_tok_per_s",
        "speedup",
        "greedy_identical",
    ):
        assert key in row
    assert row["tok_per_s"] == pytest.approx(9 / 48 * 1000)
    assert row["baseline_tok_per_s"] == pytest.approx(4 / 24 * 1000)
    assert row["greedy_identical"] is True
    assert row["draft_ms"] == 1.0 and row["verify_ms"] == 10.0


def test_a_divergence_makes_the_class_not_identical():
    events = EVENTS[:-2] + [finished(4, "identical"), finished(4, "diverged"), finished(0, "baseline")]
    row = summary(class_stats(events))["classes"]["c"]
    assert row["greedy_identical"] is False
    assert row["equivalence"] == {"identical": 1, "diverged": 1}
