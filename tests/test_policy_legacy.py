"""The rules older specmon versions decided by (policy/legacy.py): `specmon policy explain`
recomputes the decisions of their logs with them, and an older policy file still loads."""

from pathlib import Path

import pytest

from specmon.policy.explain import explain_log
from specmon.policy.legacy import Row, decide
from specmon.policy.schema import parse_policy

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"


def rows(k, n, emitted, ms, start=0):
    return [Row(start + i, k, emitted, ms) for i in range(n)]


T = {"min_gain": 0.03, "hysteresis": 0.05, "min_rounds": 4.0, "adapt": 1.0, "k_min": 1.0, "k_max": 6.0}


def test_decide_turns_off_a_losing_class_and_cites_its_rounds():
    evidence = rows(0, 5, 1, 40.0) + rows(4, 5, 1, 50.0, start=100)
    out = decide(True, 4, evidence, T)
    assert (out.speculate, out.k, out.rule) == (False, 4, "policy.min_gain")
    assert out.inputs["ratio"] == pytest.approx(0.8) and out.round_ids == [0, 1, 2, 3, 4, 100, 101, 102, 103, 104]


def test_decide_needs_the_hysteresis_margin_to_switch_back_on():
    base = rows(0, 5, 1, 40.0)
    assert decide(False, 4, base + rows(4, 5, 1, 40.0 / 1.06, start=100), T) is None  # +6% < 3% + 5%
    out = decide(False, 4, base + rows(4, 5, 1, 40.0 / 1.10, start=100), T)
    assert (out.speculate, out.rule) == (True, "policy.hysteresis")


def test_decide_moves_k_toward_the_best_goodput_not_the_best_acceptance():
    evidence = rows(0, 5, 1, 40.0) + rows(2, 5, 2, 40.0, start=100) + rows(3, 5, 3, 70.0, start=200)
    out = decide(True, 3, evidence, T)  # k=3 emits more per round but k=2 emits more per ms
    assert (out.speculate, out.k, out.rule) == (True, 2, "draft_len")


def test_decide_damps_k_moves_by_k_gain_and_needs_only_plain_rounds_of_plain():
    damped = {**T, "plain_rounds": 2.0, "k_gain": 0.08}
    spec = rows(3, 5, 3, 60.0, start=100) + rows(4, 5, 3, 60.0 / 1.05, start=200)  # k=4 is 5% faster
    assert decide(True, 3, rows(0, 2, 1, 40.0) + spec, damped) is None  # 5% < k_gain; 2 plain rounds do
    assert (
        decide(
            True, 3, rows(0, 2, 1, 40.0) + rows(3, 5, 3, 60.0, start=100) + rows(4, 5, 3, 60.0 / 1.1, start=200), damped
        ).k
        == 4
    )  # 10% > k_gain
    # thresholds from a log written before these keys: min_rounds for plain, min_gain for k
    assert decide(True, 3, rows(0, 2, 1, 40.0) + spec, T) is None
    assert decide(True, 3, rows(0, 4, 1, 40.0) + spec, T).k == 4


def test_decide_switches_off_early_when_even_perfect_rounds_would_not_pay():
    early = {**T, "min_rounds": 16.0, "plain_rounds": 2.0, "early_rounds": 4.0}
    plain = rows(0, 2, 1, 40.0)  # 25 tokens/s
    # 4 unlucky rounds at k=7, 1.5x a plain round each: 2 perfect ones would make it 2.2x plain
    assert decide(True, 7, plain + rows(7, 4, 1, 60.0, start=100), early) is None
    # the same at k=1: (4 + 2 * 2) / 6 rounds of 60 ms is 0.89x plain, so off on 4 rounds
    out = decide(True, 1, plain + rows(1, 4, 1, 60.0, start=100), early)
    assert (out.speculate, out.rule) == (False, "policy.min_gain")
    assert out.inputs["ratio"] == pytest.approx(8 / 360 / (1 / 40)) and out.round_ids == [0, 1, 100, 101, 102, 103]
    assert decide(True, 1, plain + rows(1, 3, 1, 60.0, start=100), early) is None  # fewer than early_rounds


def test_decide_rederives_the_early_off_of_older_logs_by_their_rule():
    legacy = {**T, "plain_rounds": 2.0, "early_off": 0.75}
    evidence = rows(0, 2, 1, 40.0) + rows(4, 2, 1, 60.0, start=100)
    out = decide(True, 4, evidence, legacy)
    assert (out.speculate, out.rule, out.round_ids) == (False, "policy.min_gain", [0, 1, 100, 101])
    assert decide(True, 4, rows(0, 2, 1, 40.0) + rows(4, 2, 1, 50.0, start=100), legacy) is None  # 0.8
    assert decide(True, 4, evidence, {**T, "plain_rounds": 2.0}) is None  # a log from before either


def test_decide_switches_back_on_at_the_best_k_with_evidence():
    evidence = rows(0, 4, 1, 40.0) + rows(2, 4, 2, 60.0, start=100) + rows(4, 4, 4, 80.0, start=200)
    out = decide(False, 6, evidence, T)  # off at k=6, probes measured k=2 (1.33x) and k=4 (2x)
    assert (out.speculate, out.k, out.rule) == (True, 4, "policy.hysteresis")
    assert out.round_ids == [0, 1, 2, 3, 200, 201, 202, 203]
    assert decide(False, 6, evidence, {**T, "adapt": 0.0, "k_min": 6.0, "k_max": 6.0}) is None  # fixed k


def test_decide_compares_k_on_the_prompts_where_both_ran():
    paired = {**T, "paired": 1.0, "k_gain": 0.08, "k_max": 8.0}
    plain = rows(0, 4, 1, 40.0)
    hard = [Row(100 + i, 7, 2, 60.0, "hard") for i in range(12)]  # k=7 over mostly hard prompts
    easy7 = [Row(200 + i, 7, 6, 60.0, "easy") for i in range(4)]  # and 4 rounds beside the probe
    easy6 = [Row(300 + i, 6, 5, 55.0, "easy") for i in range(4)]  # the probe of k=6 ran on the easy one
    # over all their rounds k=6 looks 2x k=7; over the same prompt it is slower: stay
    assert decide(True, 7, plain + hard + easy7 + easy6, {**paired, "min_rounds": 4.0}) is None
    assert (
        decide(True, 7, plain + hard + easy7 + easy6, {**T, "k_gain": 0.08, "k_max": 8.0, "min_rounds": 4.0}).k == 6
    )  # a log from before
    better6 = [Row(300 + i, 6, 6, 45.0, "easy") for i in range(4)]  # 1.33x k=7 on the same text
    out = decide(True, 7, plain + hard + easy7 + better6, {**paired, "min_rounds": 4.0})
    assert (out.k, out.rule) == (6, "draft_len")
    assert out.inputs["ratio"] == pytest.approx((6 / 45) / (6 / 60))
    assert out.round_ids == sorted(r.round_id for r in plain + hard + easy7 + better6)


def test_decide_waits_for_min_rounds():
    assert decide(True, 4, rows(0, 3, 1, 40.0) + rows(4, 9, 2, 40.0, start=50), T) is None


@pytest.mark.parametrize("log", ["session-policy.specmon", "session-prompt-off.specmon"])
def test_every_decision_of_an_older_log_reproduces_by_its_rule(log):
    explanations = explain_log(FIXTURES / log)
    assert len(explanations) >= 2 and all(e.reproduces for e in explanations), [e.detail for e in explanations]
    assert all(not e.decision.thresholds.get("gate") for e in explanations)


def test_an_older_policy_file_loads_with_one_warning_per_key_it_no_longer_reads():
    text = (FIXTURES / "policy-ratio.toml").read_text()
    policy = parse_policy(text, "old.toml")
    retired = ("evidence_window", "min_rounds", "plain_rounds", "hysteresis", "remeasure_every", "probe_every")
    for key in retired:
        line = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith(f"{key} ="))
        assert sum(w.startswith(f"old.toml:{line}:1: policy.{key} is no longer read") for w in policy.warnings) == 1
    assert policy.settings.min_gain == 0.03 and policy.settings.window == 256  # min_gain is still read
    ranged = [w for w in policy.warnings if "draft_len range" in w]
    assert len(ranged) == 4 and [c.draft_len for c in policy.classes] == [8, 8, 4, 4, 4]
