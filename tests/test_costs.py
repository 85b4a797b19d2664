"""The cost curve measured at load, on a target with a known cost model and a fake clock."""

import pytest

from specmon.engine import costs
from specmon.engine.costs import Costs, measure_costs


class GraphTarget:
    """A pass over T positions costs 10 + 3 (T - 1) ms, and 2 ms more when T differs from the last
    pass's (an engine that rebuilds its graph on a new shape); the fake clock advances by it."""

    max_len, vocab_size = 4096, 1000

    def __init__(self):
        self.now, self.last_shape = 0.0, None

    def clock(self) -> float:
        return self.now / 1e3

    def prefill(self, tokens):
        self.last_shape = len(tokens)

    def forward(self, tokens, start):
        self.now += 10 + 3 * (len(tokens) - 1) + (2 if len(tokens) != self.last_shape else 0)
        self.last_shape = len(tokens)

    def truncate(self, length):
        pass


def QUIET():
    return 0.0  # a host where nothing else runs


def test_a_draft_round_is_priced_with_the_rebuilds_on_both_sides_of_it(monkeypatch):
    target = GraphTarget()
    monkeypatch.setattr(costs.time, "perf_counter", target.clock)
    measured = measure_costs(target, max_positions=5, stall=QUIET)
    # plain: a step after a step, 10 ms; T: (10 + 3 (T - 1) + 2) for the pass, 10 + 2 for the step after, less 10
    assert measured.verify_ms == pytest.approx((10.0, 17.0, 20.0, 23.0, 26.0))
    assert measured.steps(1) == pytest.approx(1.7)  # timed apart (each pass after another shape) it was 15/12 = 1.25
    assert measured.draft_ms == 0.0


def test_steps_past_the_measured_curve_continue_its_last_growth():
    curve = Costs((10.0, 17.0, 20.0))
    assert curve.steps(0) == 1.0 and curve.steps(2) == 2.0
    assert curve.steps(4) == pytest.approx(2.6)  # 20 + 3 * 2 over 10


class DisturbedTarget(GraphTarget):
    """As GraphTarget, but every 3-position pass is slowed by 9 ms (a busy host only adds time)."""

    def forward(self, tokens, start):
        super().forward(tokens, start)
        self.now += 9 if len(tokens) == 3 else 0


def test_a_shorter_pass_measured_dearer_than_a_longer_one_takes_the_longer_ones_cost(monkeypatch):
    target = DisturbedTarget()
    monkeypatch.setattr(costs.time, "perf_counter", target.clock)
    measured = measure_costs(target, max_positions=5, stall=QUIET)
    assert measured.verify_ms == pytest.approx((10.0, 17.0, 23.0, 23.0, 26.0))  # 29 at T = 3 was disturbed


def test_bench_verify_prints_the_curve_a_session_measures_at_load(monkeypatch):
    """`specmon bench verify` times passes as measure_costs does (it printed passes timed apart,
    a lower curve than decoding pays: 15/12 at T = 2 here where decoding pays 17/10)."""
    from specmon.engine.costs import time_passes

    target = GraphTarget()
    monkeypatch.setattr(costs.time, "perf_counter", target.clock)
    monkeypatch.setattr(costs, "StallClock", QuietHost)
    ms = time_passes({"llamacpp": target}, context_len=40, reps=2, max_positions=4)
    assert ms == {"llamacpp": pytest.approx({1: 10.0, 2: 17.0, 3: 20.0, 4: 23.0})}


def test_bench_verify_refuses_a_context_the_cache_cannot_hold():
    from specmon.engine.costs import time_passes
    from specmon.errors import SpecmonError

    with pytest.raises(SpecmonError, match="--context 4090"):
        time_passes({"plain": GraphTarget()}, context_len=4090, reps=1, max_positions=9)


class QuietHost:
    source = "psi"

    def stall(self):
        return 0.0


class BusyHost:
    """A stall clock for GraphTarget: other work held a CPU through every pass of `busy_shape`
    positions, the first `times` times it ran (forever with None)."""

    def __init__(self, target, busy_shape, times=None):
        self.target, self.busy_shape, self.times, self.total = target, busy_shape, times, 0.0
        forward = target.forward

        def forward_and_stall(tokens, start):
            before = target.now
            forward(tokens, start)
            if len(tokens) == busy_shape and (self.times is None or self.times > 0):
                self.total += (target.now - before) * 1e3 * 0.5  # held half its time: µs
                target.now += 20  # and slower for it
                self.times = None if self.times is None else self.times - 1

        target.forward = forward_and_stall

    def stall(self):
        return self.total


def test_a_timing_the_host_disturbed_is_taken_again(monkeypatch):
    target = GraphTarget()
    host = BusyHost(target, busy_shape=3, times=2)
    monkeypatch.setattr(costs.time, "perf_counter", target.clock)
    measured = measure_costs(target, max_positions=5, stall=host.stall)
    # the warm round and the first timed round of T = 3 ran 20 ms slow under contention: retaken
    assert measured.verify_ms == pytest.approx((10.0, 17.0, 20.0, 23.0, 26.0))
    assert measured.disturbed == 0


def test_a_point_the_host_never_let_be_timed_quietly_is_counted(monkeypatch):
    target = GraphTarget()
    host = BusyHost(target, busy_shape=2)
    monkeypatch.setattr(costs.time, "perf_counter", target.clock)
    measured = measure_costs(target, max_positions=5, stall=host.stall)
    assert measured.disturbed == 1  # T = 2: always busy, priced from its least busy timing
    assert measured.verify_ms[1] == pytest.approx(20.0)  # 37 timed busy; more positions never cost less: T = 3's 20
    assert measured.verify_ms[2:] == pytest.approx((20.0, 23.0, 26.0))


def _profile(tmp_path, drafter: str, extra: str = "") -> str:
    """The embedded default with its round costs pinned and the given [drafter] table."""
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "profiles" / "smollm2-cpu.toml").read_text()
    head, _, rest = text.partition("[drafter]")
    body = rest[rest.index("[sampling]") :]
    path = tmp_path / "pinned.toml"
    path.write_text(
        head.replace("\n[target]", f"\nverify_costs = [1.0, 1.2, 1.4]\n{extra}\n[target]", 1) + drafter + body
    )
    return str(path)


MODEL_DRAFTER = '[drafter]\nkind = "model"\ndraft_len = 2\n\n[drafter.target]\nmodel = "smollm2-135m-instruct"\n\n'


def test_a_pinned_curve_with_a_model_drafter_needs_its_draft_cost_pinned_too(tmp_path):
    from specmon.backends.profiles import load_profile
    from specmon.errors import SpecmonError

    with pytest.raises(SpecmonError) as refused:
        load_profile(_profile(tmp_path, MODEL_DRAFTER))
    said = str(refused.value)
    assert "\n" not in said and ": verify_costs: " in said and "add draft_cost" in said  # one line, its key's
    assert load_profile(_profile(tmp_path, '[drafter]\nkind = "ngram"\n\n')).draft_cost == -1.0  # n-gram: free
    assert load_profile(_profile(tmp_path, MODEL_DRAFTER, "draft_cost = 0.25\n")).draft_cost == 0.25


@pytest.mark.slow  # loads the target and a draft model
def test_a_pinned_draft_cost_prices_each_drafted_token(tmp_path):
    """The session's costs: the pinned curve and draft cost, in plain steps; a 2-token draft's round
    is its 3-position pass plus two drafted tokens."""
    from specmon.backends.loader import load_pair
    from specmon.backends.profiles import load_profile
    from specmon.policy.schema import load_policy
    from specmon.transport.session import live_session

    profile = load_profile(_profile(tmp_path, MODEL_DRAFTER, "draft_cost = 0.25\n"))
    pair = load_pair(profile)
    with live_session(pair, profile, tmp_path / "s.specmon", policy=load_policy("default"), announce=False) as s:
        assert (s.costs.verify_ms, s.costs.draft_ms) == ((1.0, 1.2, 1.4), 0.25)
        assert s.costs.steps(2) == pytest.approx(1.4 + 2 * 0.25)
