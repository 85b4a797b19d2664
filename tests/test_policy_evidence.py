"""The policy on evidence it can trust: a prompt's own first rounds act for that prompt (a
copying prompt turns speculation on in a class that is off; a prompt whose drafts fail turns it
off in a class that is on), class switches wait for the goodput ratio's 95% interval over prompts,
so a stationary workload does not flap, and every decision, the new kinds too, is recomputed
exactly from the rounds it cites. Driven through the live PolicyScheduler on the scripted pair."""

import numpy as np
import pytest

from specmon.engine import rounds as rounds_module
from specmon.events.schema import Decision, RoundVerified, Sampling
from specmon.metrics.interval import PromptTotals, speedup_estimate
from specmon.policy.decide import Row, by_draft_len, decide, decide_prompt, estimate, same_text, totals
from specmon.policy.engine import PolicyEngine
from specmon.policy.explain import explain
from specmon.policy.schema import parse_policy
from test_policy import DEFAULT, PolicySession, ScriptedClock

IV = {"min_gain": 0.03, "hysteresis": 0.05, "min_rounds": 4.0, "plain_rounds": 4.0, "k_gain": 0.08,
      "adapt": 1.0, "k_min": 1.0, "k_max": 6.0, "interval": 1.0}


@pytest.fixture
def session(monkeypatch):
    clock = ScriptedClock()
    monkeypatch.setattr(rounds_module, "time", clock)
    return lambda policy, silent_every=0: PolicySession(policy, clock, silent_every)


def default_policy():
    return parse_policy(DEFAULT.read_text(), "default.toml")


def explained(live: PolicySession) -> list:
    """Every decision of the session recomputed from its cited rounds, as `policy explain` does."""
    rows = {ev.round_id: Row.of(ev) for ev in live.events if isinstance(ev, RoundVerified)}
    return [explain(d, rows) for d in live.events if isinstance(d, Decision)]


def prompt_rows(k, prompts, per_prompt, emitted, ms_by_prompt, start=0):
    out, rid = [], start
    for p in range(prompts):
        for _ in range(per_prompt):
            out.append(Row(rid, k, emitted, ms_by_prompt[p % len(ms_by_prompt)], f"p{p}"))
            rid += 1
    return out


# -- the decision rule with intervals ---------------------------------------------------------

def test_interval_decisions_show_the_tui_figure_and_wait_until_it_clears_the_line():
    plain = prompt_rows(0, 4, 4, 1, [40.0, 44.0, 38.0, 42.0])
    # 0.8x plain on every prompt: the interval's high end is below 1.03, so off
    losing = prompt_rows(4, 4, 4, 1, [50.0, 55.0, 47.5, 52.5], start=100)
    out = decide(True, 4, plain + losing, IV)
    assert (out.speculate, out.rule) == (False, "policy.min_gain")
    want = speedup_estimate(PromptTotals({f"p{i}": 4 for i in range(4)}, {f"p{i}": 4 * m for i, m in
                                          enumerate([50.0, 55.0, 47.5, 52.5])}),
                            PromptTotals({f"p{i}": 4 for i in range(4)}, {f"p{i}": 4 * m for i, m in
                                          enumerate([40.0, 44.0, 38.0, 42.0])}), seed=0)
    assert out.inputs["ratio"] == pytest.approx(want.ratio) and out.inputs["low"] == want.low
    assert out.inputs["high"] == want.high < 1.03
    assert {k: out.inputs[k] for k in ("rounds_spec", "rounds_base", "prompts_spec", "prompts_base")} == \
        {"rounds_spec": 16.0, "rounds_base": 16.0, "prompts_spec": 4.0, "prompts_base": 4.0}
    # one prompt a side gives no interval: not yet known, so nothing moves, however bad the ratio
    assert decide(True, 4, plain[:4] + losing[:4], IV) is None
    # a ratio past the line whose interval straddles it does not switch back on
    noisy = prompt_rows(4, 4, 4, 1, [20.0, 50.0, 22.0, 45.0], start=200)
    est = speedup_estimate(PromptTotals({f"p{i}": 4 for i in range(4)},
                                        {f"p{i}": 4 * m for i, m in enumerate([20.0, 50.0, 22.0, 45.0])}),
                           PromptTotals({f"p{i}": 4 for i in range(4)},
                                        {f"p{i}": 4 * m for i, m in enumerate([40.0, 44.0, 38.0, 42.0])}), seed=0)
    assert est.ratio > 1.08 and est.low < 1.03
    assert decide(False, 4, plain + noisy, IV) is None
    winning = prompt_rows(4, 4, 2, 1, [30.0, 33.0, 28.5, 31.5], start=300)
    winning += prompt_rows(4, 4, 2, 1, [30.0, 33.0, 28.5, 31.5], start=400)
    on = decide(False, 4, plain + winning, IV)
    assert (on.speculate, on.k, on.rule) == (True, 4, "policy.hysteresis") and on.inputs["low"] >= 1.03


def test_with_silent_plain_a_switch_judges_the_rounds_that_drafted():
    th = {**IV, "silent_plain": 1.0, "switch_drafted": 1.0}
    rows, rid = [], 0
    for p, draft_ms in enumerate([70.0, 74.0, 71.0, 76.0]):  # 2 tokens a drafting round: ~1.1x plain
        for i in range(44):  # 40 silent rounds (40 ms, one token: a plain step) and 4 that drafted
            drafted = i % 11 == 10
            rows.append(Row(rid, 8, 2 if drafted else 1, draft_ms if drafted else 40.0, f"p{p}", 8 if drafted else 0))
            rid += 1
    drafting = [r for r in rows if r.proposed]
    silent = [r for r in rows if not r.proposed]
    # over all its rounds k is barely past plain (silent rounds pull the ratio to 1): a class whose
    # drafts are rare but pay would be switched off on that figure ...
    overall = speedup_estimate(totals(rows), totals(silent), seed=0)
    assert overall.high < 1.03 < estimate(drafting, silent).low
    # ... the drafting rounds against plain (the silent ones) say it pays: it stays on
    assert decide(True, 8, rows, th) is None
    early = decide(True, 8, rows, {**IV, "silent_plain": 1.0})  # as logs from before switch_drafted decided
    assert (early.speculate, early.inputs["high"]) == (False, overall.high)
    # and a class whose drafts lose is switched off on those rounds, which it cites beside the silent ones
    losing = [Row(r.round_id, 8, 1, r.round_ms, r.prompt_id, r.proposed) for r in rows]
    off = decide(True, 8, losing, th)
    assert (off.speculate, off.rule) == (False, "policy.min_gain") and off.inputs["rounds_spec"] == len(drafting)
    assert off.inputs["rounds_base"] == len(silent) and off.round_ids == [r.round_id for r in rows]
    assert explain_rows(off, losing, th)


def explain_rows(out, rows, th) -> bool:
    """`policy explain` on a decision made from these rows: its cited rounds alone give it again."""
    by_id = {r.round_id: r for r in rows}
    d = Decision(session_id="s", t=0.0, decision_id=0, prompt_class="c", speculate_from=True,
                 speculate_to=out.speculate, k_from=8, k_to=out.k, rule_key=out.rule, rule_line=1,
                 inputs=out.inputs, thresholds=th, round_ids=out.round_ids, applied=True, policy_sha256="", reason="")
    return explain(d, by_id).reproduces


def test_a_prompt_decision_stands_on_its_own_first_rounds():
    th = {**IV, "prompt": 1.0, "prompt_rounds": 4.0}
    plain = prompt_rows(0, 2, 4, 1, [40.0, 40.0])
    copying = [Row(100 + i, 4, 5, 60.0, "q", 4) for i in range(4)]  # 5 tokens per 60 ms: 3.3x plain
    on = decide_prompt(False, 4, plain + copying, th)
    assert (on.speculate, on.rule) == (True, "policy.prompt_rounds") and on.inputs["ratio"] == pytest.approx(10 / 3)
    failing = [Row(100 + i, 4, 1, 70.0, "q", 4) for i in range(4)]  # every draft rejected
    silent = [Row(90 + i, 4, 1, 40.0, "q", 0) for i in range(6)]  # rounds that drafted nothing do not count
    off = decide_prompt(True, 4, plain + silent + failing, th)
    assert (off.speculate, off.rule) == (False, "policy.prompt_rounds")
    assert off.round_ids == sorted(r.round_id for r in plain + failing)
    assert decide_prompt(True, 4, plain + silent + failing[:3], th) is None  # fewer than prompt_rounds
    assert decide(True, 4, plain + failing, th).round_ids == off.round_ids  # explain's entry point
    # with silent_plain (prompt_off = 1) a prompt goes off only when its drafts lose: 1.5% ahead of
    # plain is below min_gain, but four rounds are too few to ask a margin of
    ahead = [Row(100 + i, 4, 1, 40.0 / 1.015, "q", 4) for i in range(4)]
    assert decide_prompt(True, 4, plain + ahead, th).speculate is False
    assert decide_prompt(True, 4, plain + ahead, {**th, "prompt_off": 1.0}) is None
    behind = [Row(100 + i, 4, 1, 40.0 / 0.98, "q", 4) for i in range(4)]
    assert decide_prompt(True, 4, plain + behind, {**th, "prompt_off": 1.0}).speculate is False


def probed_prompt(name, start, probe_emitted, later_rounds):
    """One prompt run as a probe of k=7 leaves it: 8 pairs of a k=7 round then a k=8 round over
    the same copy-rich stretch (6 tokens in 45 ms at k=8), then k=8 alone over a later stretch
    that copies little (2 tokens in 40 ms)."""
    out, rid = [], start
    for index in range(16):
        k = 7 if index % 2 == 0 else 8
        out.append(Row(rid, k, probe_emitted if k == 7 else 6, 45.0, name, 6, index))
        rid += 1
    for index in range(16, 16 + later_rounds):
        out.append(Row(rid, 8, 2, 40.0, name, 2, index))
        rid += 1
    return out


def test_a_k_move_compares_each_probe_round_with_the_round_right_after_it():
    plain = prompt_rows(0, 4, 4, 1, [30.0, 31.0, 29.0, 30.5])
    adjacent = {**IV, "k_max": 8.0, "adjacent": 1.0}
    even = [r for p in range(4) for r in probed_prompt(f"p{p}", 100 * (p + 1), 6, 12 + p)]
    # k=7 and k=8 decode the same stretch alike; k=8's later rounds copy little
    assert decide(True, 8, plain + even, adjacent) is None
    old = decide(True, 8, plain + even, {**IV, "k_max": 8.0})  # a log from before: every k=8 round of the prompt
    assert (old.k, old.rule) == (7, "draft_len") and old.inputs["ratio"] > 1.5
    better = [r for p in range(4) for r in probed_prompt(f"p{p}", 100 * (p + 1), 7, 12 + p)]
    out = decide(True, 8, plain + better, adjacent)  # 7 tokens against 6 on the same text: a real gain
    assert (out.k, out.rule) == (7, "draft_len")
    assert out.inputs["ratio"] == pytest.approx(7 / 6)
    assert out.inputs["rounds_spec"] == out.inputs["rounds_base"] == 32  # 8 pairs in each of 4 prompts


def alternating_prompt(name, start, probe_k, pairs, scale):
    """A probe of `probe_k` in turn with k=8: each pair is (probe round, k=8 round), as Rows
    (round id, k, emitted, ms, prompt, proposed, index); `pairs` gives each pair's
    (probe proposed, emitted, ms) and (k=8 proposed, emitted, ms), ms scaled per prompt."""
    out, rid = [], start
    for n, ((p_prop, p_em, p_ms), (m_prop, m_em, m_ms)) in enumerate(pairs):
        out.append(Row(rid, probe_k, p_em, p_ms * scale, name, p_prop, 2 * n))
        out.append(Row(rid + 1, 8, m_em, m_ms * scale, name, m_prop, 2 * n + 1))
        rid += 2
    return out


def test_a_k_move_compares_only_the_pairs_where_a_draft_reached_the_shorter_k():
    """A probe's first round comes right after the prompt and drafts nothing; its partner finds a
    short match that fails. Drafts shorter than both k run alike at either k, so such pairs say
    nothing about k, yet they made k=6 look 1.375x k=8 (the text's difference, not k's)."""
    plain = prompt_rows(0, 4, 4, 1, [30.0, 31.0, 29.0, 30.5])
    capped = {**IV, "k_max": 8.0, "adjacent": 1.0, "capped": 1.0}
    short = ((0, 1, 30.0), (2, 1, 60.0))  # neither draft reached 6: k played no part
    even = ((6, 7, 50.0), (8, 7, 50.0))  # a copy both k cut alike
    rows = [r for p in range(4) for r in alternating_prompt(f"p{p}", 100 * (p + 1), 6, [short] * 4 + [even] * 4,
                                                              1 + p / 10)]
    old = decide(True, 8, plain + rows, {**IV, "k_max": 8.0, "adjacent": 1.0})  # a log from before: every pair
    assert (old.k, old.rule) == (6, "draft_len") and old.inputs["ratio"] == pytest.approx(1.375)
    assert decide(True, 8, plain + rows, capped) is None
    # k=8 drafts past where its copies stop; k=4 gets as far for less: a real gain, over the capped pairs
    costly = ((4, 5, 40.0), (8, 5, 60.0))
    rows = [r for p in range(4) for r in alternating_prompt(f"p{p}", 100 * (p + 1), 4, [short] * 4 + [costly] * 4,
                                                              1 + p / 10)]
    out = decide(True, 8, plain + rows, capped)
    assert (out.k, out.rule) == (4, "draft_len")
    assert out.inputs["ratio"] == pytest.approx(1.5)
    assert out.inputs["rounds_spec"] == out.inputs["rounds_base"] == 16  # 4 capped pairs in each of 4 prompts


def test_a_pair_counts_when_either_round_drafted_as_far_as_the_shorter_k():
    """Which pairs `capped` keeps, with the probe's k below the class's and above it: those where
    either round proposed at least the shorter k (a draft that long may have been cut by it)."""
    def kept(probe_k, class_k, proposals):
        rows = []
        for n, (probe, mine) in enumerate(proposals):
            rows += [Row(2 * n, probe_k, 1, 30.0, "p", probe, 2 * n),
                     Row(2 * n + 1, class_k, 1, 30.0, "p", mine, 2 * n + 1)]
        theirs, _ = same_text([r for r in rows if r.draft_len == probe_k], [r for r in rows if r.draft_len == class_k],
                              class_k, {"adjacent": 1.0, "capped": 1.0})
        return [r.index // 2 for r in theirs]

    # probe k=6 beside k=8: its own 6 (cut), or k=8's 6 or 7 (6 would cut them) count; 5 and 5 do not
    assert kept(6, 8, [(6, 0), (0, 7), (5, 6), (5, 5), (0, 2)]) == [0, 1, 2]
    # probe k=8 beside k=6: k=6's own 6 (cut), or the probe's 6 or more count
    assert kept(8, 6, [(2, 6), (7, 0), (6, 2), (5, 5), (0, 0)]) == [0, 1, 2]


# -- per-request evidence, live --------------------------------------------------------------

def test_a_copying_prompt_in_an_off_class_turns_speculation_on_for_itself(session):
    live = session(default_policy(), silent_every=2)  # every other round drafts nothing: a plain step
    live.prompt("chat", rounds=30, speedup=2 / 3, emitted=1)  # drafts fail; its silent rounds measure plain
    live.engine.state("chat").speculate = False  # the class is off
    plan, ks, decisions = live.prompt("chat", rounds=40, speedup=2.0, emitted=3)
    k, watch = live.engine.state("chat").k, live.engine.policy.settings.prompt_rounds
    # the prompt's own first rounds at k (every other one silent), then on for the rest of it
    assert plan.lead is None and ks == [k] * 40
    (decision,) = decisions
    assert (decision.speculate_from, decision.speculate_to, decision.rule_key) == (False, True, "policy.prompt_rounds")
    assert decision.reason.startswith("prompt p2") and decision.inputs["ratio"] == pytest.approx(2.0)
    assert decision.inputs["rounds_spec"] == watch and decision.inputs["rounds_base"] >= 15  # silent rounds as plain
    assert not live.engine.state("chat").speculate  # the class stays off: one prompt is no class verdict
    # a prompt that does not copy goes plain after its own first rounds
    _, ks, decisions = live.prompt("chat", rounds=30, speedup=0.9, emitted=1)
    assert ks[:2 * watch - 1] == [k] * (2 * watch - 1) and set(ks[2 * watch:]) == {0} and decisions == []
    assert all(e.reproduces for e in explained(live))


def test_a_prompt_whose_drafts_fail_turns_speculation_off_for_itself(session):
    live = session(default_policy(), silent_every=2)
    s = live.engine.policy.settings
    plan, ks, decisions = live.prompt("rewrite", rounds=40, speedup=0.5, emitted=1)  # every draft fails
    k = live.engine.state("rewrite").k
    # no plain run first: its silent rounds measure plain; judged once plain_rounds of them are in
    judged = 2 * s.plain_rounds + 1
    assert plan.lead is None and ks == [k] * judged + [0] * (40 - judged)
    (decision,) = decisions
    assert (decision.speculate_from, decision.speculate_to, decision.rule_key) == (True, False, "policy.prompt_off")
    assert decision.inputs["ratio"] == pytest.approx(0.5) and decision.inputs["rounds_base"] == s.plain_rounds
    assert decision.thresholds["prompt_off"] == s.prompt_off == 0.7
    assert live.engine.state("rewrite").speculate  # the class stays on
    # the next prompt, which copies, speculates from its first round
    _, ks, decisions = live.prompt("rewrite", rounds=20, speedup=1.5, emitted=3)
    assert set(ks) == {k} and decisions == []
    assert all(e.reproduces for e in explained(live))


def test_a_prompt_whose_drafts_lose_less_than_prompt_off_says_keeps_speculating(session):
    """Short failed drafts lose ~20% to plain, then the prompt may copy: the shipped line (0.7) keeps
    it on; a policy without the key turns it off as before (below plain: prompt_off = 1)."""
    live = session(default_policy(), silent_every=2)
    _, ks, decisions = live.prompt("rewrite", rounds=40, speedup=0.8, emitted=1)
    assert decisions == [] and set(ks) == {live.engine.state("rewrite").k}
    assert "\nprompt_off = 0.7 " in DEFAULT.read_text()
    text = DEFAULT.read_text().replace("prompt_off = 0.7", "")
    live = session(parse_policy(text, "default.toml"), silent_every=2)
    _, ks, (decision,) = live.prompt("rewrite", rounds=40, speedup=0.8, emitted=1)
    assert (decision.speculate_to, decision.rule_key, decision.thresholds["prompt_off"]) == (
        False, "policy.prompt_rounds", 1.0)
    assert ks[-1] == 0 and all(e.reproduces for e in explained(live))


# -- no flapping on a stationary workload -------------------------------------------------------

def stationary(live: PolicySession, name: str, prompts: int, mean: float, spread: float, seed: int) -> list:
    """`prompts` prompts whose speedup at the class's k is drawn, prompt by prompt, from one
    distribution: nothing about the workload changes. The class decisions taken meanwhile."""
    rng = np.random.default_rng(seed)
    found = []
    for _ in range(prompts):
        speedup = float(np.clip(rng.normal(mean, spread), 0.3, 3.0))
        found += live.prompt(name, rounds=24, speedup=speedup, emitted=3)[2]
    return [d for d in found if "prompt" not in d.thresholds]


def flips(decisions: list) -> int:
    return sum(d.speculate_from != d.speculate_to for d in decisions)


@pytest.mark.parametrize("silent_every", [0, 3])  # drafts never stop; every third round drafts nothing
@pytest.mark.parametrize("mean", [0.95, 1.03, 1.06, 1.2])
def test_no_class_flips_more_than_twice_per_hundred_prompts_on_a_stationary_workload(session, mean, silent_every):
    live = session(default_policy(), silent_every)
    decisions = stationary(live, "rewrite", 200, mean, 0.15, seed=7)
    assert flips(decisions) <= 4, [(d.decision_id, d.speculate_to, round(d.inputs["ratio"], 3)) for d in decisions]
    assert all(e.reproduces for e in explained(live))


def test_silent_rounds_measure_plain_so_no_plain_run_is_needed_while_drafts_stop(session):
    live = session(default_policy(), silent_every=3)
    plans = [live.prompt("rewrite", rounds=30, speedup=1.5, emitted=3)[0] for _ in range(30)]
    assert not [p for p in plans if p.lead and p.lead[0] == 0]  # never a plain run: silent rounds keep plain current
    # a class that loses is switched off on the silent rounds' evidence, which its decision cites
    decisions = [d for _ in range(12) for d in live.prompt("chat", rounds=30, speedup=0.6, emitted=1)[2]
                 if "prompt" not in d.thresholds]
    assert [(d.speculate_from, d.speculate_to) for d in decisions] == [(True, False)]
    rounds = {e.round_id: e for e in live.events if isinstance(e, RoundVerified)}
    cited = [rounds[i] for i in decisions[0].round_ids]
    silent = [e for e in cited if e.draft_len and not e.proposed]
    assert silent and len(silent) + sum(1 for e in cited if not e.draft_len) == decisions[0].inputs["rounds_base"]
    assert decisions[0].thresholds["silent_plain"] == 1.0
    assert all(e.reproduces for e in explained(live))


def test_a_class_whose_drafts_never_stop_measures_plain_in_a_short_run(session):
    live = session(default_policy())  # the drafter proposes every round: no silent rounds
    s = live.engine.policy.settings
    plans = [live.prompt("rewrite", rounds=30, speedup=1.5, emitted=3)[0] for _ in range(s.remeasure_every + 1)]
    assert [p.lead for p in plans[:-1]] == [None] * s.remeasure_every
    assert plans[-1].lead == (0, s.plain_rounds)  # after remeasure_every prompts without plain evidence


def test_a_new_class_borrows_the_sessions_plain_rounds_instead_of_starting_with_a_plain_run(session):
    live = session(default_policy())
    for _ in range(live.engine.policy.settings.remeasure_every + 1):
        live.prompt("rewrite", rounds=30, speedup=1.5, emitted=3)  # the last one starts with a plain run
    plan, ks, decisions = live.prompt("chat", rounds=30, speedup=1.5, emitted=3)
    assert plan.lead is None and set(ks) == {live.engine.state("chat").k}  # speculates from its first round
    # its own evidence is judged against the borrowed plain rounds, which the decisions cite
    for _ in range(12):
        live.prompt("chat", rounds=30, speedup=0.6, emitted=1)
    assert all(e.reproduces for e in explained(live))


def test_the_engine_groups_its_evidence_as_decide_groups_the_cited_rounds(session):
    """A check groups the class's windows itself (no sort of every row): the same lists, in the same
    order, as decide() builds from the rows, so live sums and `policy explain`'s agree to the bit."""
    live = session(parse_policy(DEFAULT.read_text().replace("silent_plain = true", "silent_plain = false"), "p"),
                   silent_every=3)
    stationary(live, "rewrite", 20, 1.1, 0.2, seed=3)
    live.engine.flush()  # as maybe_reload does before the new policy takes over
    live.engine.policy = default_policy()  # a reload turns silent_plain on: the silent rounds before it count too
    stationary(live, "rewrite", 20, 1.1, 0.2, seed=4)
    engine = live.engine
    st = engine.state("rewrite")
    assert len(st.windows) > 2 and st.silent  # several k (probes) and silent rounds
    rows = [row for k, window in st.windows.items() if k for row in window] + engine.plain_decoded(st)
    thresholds = engine.thresholds(engine.class_of("rewrite"))
    expected = by_draft_len(sorted(rows, key=lambda r: r.round_id), thresholds)
    assert engine._grouped(st) == expected and list(expected[0]) == sorted(expected[0])
    assert all(e.reproduces for e in explained(live))


@pytest.mark.parametrize("edit", [("", ""), ("plain_rounds = 8", "plain_rounds = 2")])  # 2: below EARLY_ROUNDS
def test_rounds_set_aside_bring_the_same_decisions_at_the_same_rounds(session, monkeypatch, edit):
    """after_round sets aside the rounds that can bring no decision and observes them with the next
    that might: every decision, its round, cited rounds and inputs, as observing each at once gives."""
    policy = lambda: parse_policy(DEFAULT.read_text().replace(*edit), "default.toml")  # noqa: E731
    def decisions(live):
        for mean, seed in ((1.3, 5), (0.7, 6), (1.4, 7)):  # the class goes off, then on again
            stationary(live, "rewrite", 30, mean, 0.15, seed=seed)
        live.prompt("chat", rounds=30, speedup=0.6, emitted=1)
        return [(d.decision_id, d.prompt_class, d.speculate_to, d.k_to, d.round_ids, d.reason,
                 {key: round(value, 9) for key, value in d.inputs.items()})  # the shared clock runs on: last bits
                for d in live.events if isinstance(d, Decision)]

    set_aside = session(policy(), silent_every=3)
    engine_type = type(set_aside.engine)
    flushed, by_hook = [], []  # rounds observed at each flush (all set aside), rounds the hook set aside itself
    original_flush, original_set_aside = engine_type.flush, engine_type.set_aside
    monkeypatch.setattr(engine_type, "flush", lambda self: flushed.append(len(self._pending)) or original_flush(self))

    def counted(self):
        append = original_set_aside(self)
        return lambda event: by_hook.append(event.round_id) or append(event)

    monkeypatch.setattr(engine_type, "set_aside", counted)
    deferred = decisions(set_aside)
    rounds = sum(isinstance(e, RoundVerified) for e in set_aside.events)
    monkeypatch.setattr(engine_type, "_quiet", lambda *a: False)
    monkeypatch.setattr(engine_type, "grant_quiet", lambda *a: (0, False))
    at_once = decisions(session(policy(), silent_every=3))
    assert deferred == at_once
    assert len([d for d in deferred if "prompt" not in d[5]]) >= 2  # class decisions, not only prompt ones
    assert sum(flushed) > rounds / 3  # many rounds were set aside (most at plain_rounds = 8)
    assert len(by_hook) > rounds / 4  # and most of those by the round hook, on the engine's grant


def test_a_probe_that_a_prompt_ended_after_one_of_its_rounds_is_finished_by_the_next():
    """Moves compare probe rounds paired with the round after them: a prompt that ended on a probe
    round leaves it unpaired, so 16 probe rounds can be 15 pairs; the next prompt finishes it."""
    engine = PolicyEngine(default_policy(), "s")
    engine.start_prompt("rewrite")
    st = engine.state("rewrite")
    assert st.k == 8 and st.speculate

    def feed(prompt, ks, start):
        for index, k in enumerate(ks):
            engine.observe(RoundVerified(
                session_id="s", t=0.0, round_id=start + index, prompt_id=prompt, prompt_class="rewrite",
                round_index=index, draft_len=k, proposed=[1] if k else [], accepted=0, rejection_pos=0 if k else None,
                emitted=[1], draft_ms=0.0, verify_ms=30.0, overhead_ms=0.0, target_probs=[], alpha_hat=None,
                margins=[], sampling=Sampling(), mem_bytes=0))

    cls = engine.class_of("rewrite")
    feed("plain", [0] * 8, 0)
    feed("a", [8] * 24, 100)
    feed("b", [7, 8] * 3 + [7], 200)  # the probe of k=7, cut by the prompt's end after a k=7 round
    assert engine._paired(st, 7) == (3, 0) and engine._cut_short(cls, st) == {7: 3}
    feed("c", [7, 8] * 5 + [7], 300)  # its next part, cut the same way: 10 rounds at k=7, 8 paired
    assert engine._rounds(st, 7) == 10 and engine._paired(st, 7) == (8, 0)
    assert engine._cut_short(cls, st) == {7: 8}
    plan = engine.plan("rewrite")
    assert plan.lead == (7, 8) and plan.alternate  # the pairs it still lacks
    feed("d", [7, 8] * 8, 400)
    assert engine._paired(st, 7) == (16, 0) and engine._cut_short(cls, st) == {}  # finished
    feed("e", [8] * 330, 500)  # k=8's window moves past every k=7 round's partner
    assert engine._paired(st, 7) == (0, 18) and engine._cut_short(cls, st) == {}  # left to the cadence
