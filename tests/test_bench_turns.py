"""`specmon bench policy` decodes each prompt at every k side by side, round by round, on forked
KV caches: the outputs must be what each decode gives alone, and the log must read as before."""

import pytest

from specmon.backends.loader import load_pair
from specmon.backends.profiles import DrafterSpec, ModelRef, load_profile
from specmon.engine.drafters import NgramDrafter, NoDrafter
from specmon.engine.draft_len import FixedDraftLen
from specmon.engine.prompts import builtin_suite
from specmon.events.schema import BENCH_FIXED_RULE, PromptFinished, PromptStarted, RoundVerified, Sampling
from specmon.policy.engine import PolicyEngine
from specmon.policy.schema import load_policy
from specmon.metrics.contention import tally
from specmon.sched.bench import bench_results, run_bench
from specmon.sched.turns import rotated, take_turns
from specmon.sched.policy import PolicyScheduler
from specmon.transport.session import live_session as open_session
from tinymodel import tiny_profile
from events import round_verified

KS = [0, 2, 5]


def test_every_arm_takes_every_place_in_turn():
    arms = ["plain", "k2", "k4"]
    orders = [rotated(arms, index) for index in range(6)]
    for place in range(3):
        assert sorted(order[place] for order in orders) == sorted(arms * 2)  # each arm twice in each place
    assert rotated(["plain", "ngram"], 1) == ["ngram", "plain"] and rotated([], 3) == []


SAMPLED = Sampling(temperature=1.0, seed=7)  # each k draws its own text, so decodes sharing a cache would clash


@pytest.fixture(scope="module", params=[None, SAMPLED], ids=["greedy", "sampled"])
def bench_log(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("turns")
    profile = load_profile(str(tiny_profile(tmp)))
    sampling = request.param or profile.sampling.to_event()
    # sampled: a draft model (the target cut to 1 layer) proposes every round, so k changes the text
    drafter = (
        DrafterSpec(kind="ngram", draft_len=4)
        if sampling.greedy
        else DrafterSpec(kind="model", target=ModelRef(path=str(tmp / "tiny.gguf"), layers=1))
    )
    pair = load_pair(profile, drafter)
    policy = load_policy("default")
    prompts = builtin_suite()[::5]  # chat, code-new, code-edit, rewrite
    with open_session(pair, profile, tmp / "bench.specmon", policy=policy, announce=False) as session:
        scheduler = PolicyScheduler(
            session.driver, PolicyEngine(policy, session.session_id, session.costs), pair.drafter, on_reload=None
        )
        run_bench(scheduler, prompts, KS, 1, sampling, 20)
        bench_events = list(session.events)
        alone = {}  # each prompt at each fixed k decoded alone, on the session's own cache
        for prompt in prompts:
            scheduler.configure_drafter(scheduler.engine.classify(prompt.text, None)[0])
            for k in KS:
                done = session.driver.decode(prompt, pair.drafter if k else NoDrafter(), FixedDraftLen(k), sampling, 20)
                alone[prompt.id, k] = done.run.generated
    return bench_events, alone, sampling


def decodes(events):
    """Each decode's PromptStarted with the rounds that follow it, in log order."""
    runs = []
    for ev in events:
        if isinstance(ev, PromptStarted):
            runs.append((ev, []))
        elif isinstance(ev, RoundVerified) and runs:
            runs[-1][1].append(ev)
    return runs


def test_every_decode_of_a_prompt_gives_what_it_gives_alone(bench_log):
    events, alone, sampling = bench_log
    finished = {}
    for started, ev in zip(
        [e for e in events if isinstance(e, PromptStarted)], [e for e in events if isinstance(e, PromptFinished)]
    ):
        assert started.prompt_id == ev.prompt_id
        if started.class_rule.startswith(BENCH_FIXED_RULE):
            finished[ev.prompt_id, int(started.class_rule[len(BENCH_FIXED_RULE) :])] = ev.generated
        elif sampling.greedy:  # the policy's decode: greedy gives one text at every k
            assert ev.generated == alone[ev.prompt_id, 0]
    assert finished == alone
    if not sampling.greedy:  # the check has teeth: the sampled texts differ between k, so shared caches would clash
        assert any(alone[p, 0] != alone[p, 5] for p, _ in alone)


def test_decodes_take_turns_but_the_log_keeps_each_together(bench_log):
    events, _, _ = bench_log
    bench = [(s, rounds) for s, rounds in decodes(events)[: 4 * (len(KS) + 1)]]
    for started, rounds in bench:
        assert rounds and all(r.prompt_id == started.prompt_id for r in rounds)
        assert [r.round_index for r in rounds] == list(range(len(rounds)))
    first = bench[: len(KS) + 1]  # one prompt's decodes: their round ids interleave
    spans = [(rounds[0].round_id, rounds[-1].round_id) for _, rounds in first]
    ids = sorted(r.round_id for _, rounds in first for r in rounds)
    assert ids == list(range(ids[0], ids[0] + len(ids)))  # no other decode's rounds between them
    assert all(lo < other_hi and other_lo < hi for lo, hi in spans for other_lo, other_hi in spans)
    fixed = {int(s.class_rule[len(BENCH_FIXED_RULE) :]) for s, _ in first if s.class_rule.startswith(BENCH_FIXED_RULE)}
    assert fixed == set(KS)
    assert set(bench_results(events)) <= {"chat", "code-edit", "rewrite", "non-english"}


def test_the_decode_with_fewest_tokens_goes_next():
    trace = []

    def decode(name, steps):
        made = 0
        for step in steps:
            made += step
            trace.append(name)
            yield made
        return made

    take_turns([decode("fast", [4, 4, 4]), decode("slow", [1] * 12)])
    assert trace == [
        "fast",
        "slow",
        "slow",
        "slow",
        "slow",
        "fast",
        "slow",
        "slow",
        "slow",
        "slow",
        "fast",
        "slow",
        "slow",
        "slow",
        "slow",
    ]


def test_forked_drafter_keeps_its_own_confidence():
    drafter = NgramDrafter()
    drafter.confident(2, 1)
    twin = drafter.fork()
    twin.confident(0)
    assert (drafter.min_match, twin.min_match) == (2, 0)


def timed_round(round_id, ms, stall_ms, t=0.0):
    return round_verified(t=t, round_id=round_id, round_index=round_id, verify_ms=ms, host_stall_ms=stall_ms)


def test_host_stalls_are_rounds_the_host_made_wait_for_a_cpu():
    quiet = [timed_round(i, 40.0, 0.5, t=1000.0 + i) for i in range(20)]  # 1.25% of a round: quiet
    busy = [timed_round(20, 80.0, 4.0, t=2000.0), timed_round(21, 90.0, 81.0, t=2100.0)]  # 5% and 90%
    unmeasured = timed_round(22, 40.0, None)  # an older log's round says nothing either way
    found = tally([*quiet, *busy, unmeasured])
    assert (found.measured, found.disturbed, found.peak) == (22, 2, pytest.approx(0.9))
    assert found.share == pytest.approx(2 / 22) and not found.busy  # under 10% of rounds: mostly quiet
    assert "host mostly quiet: 2 of 22 rounds disturbed (9.1%), peak 90% of a round" in found.line()
    assert tally([*quiet, unmeasured]).line() is None
    assert tally([unmeasured]).said() == "" and tally(quiet).said() == "quiet"
    assert not tally([*quiet[:10], *busy]).busy  # 2 of 12: over 10%, but two stray rounds are not a busy host
    assert tally([*quiet[:10], *busy, *busy, *busy[:1]]).busy  # 5 of 15
