"""Policies: refused with the right line, edited without losing a comment, hot-reloaded safely,
scheduled round by round through the live PolicyScheduler and SessionDriver, and every logged
decision recomputed from the rounds it cites."""

import os
import re
import time
from pathlib import Path

import msgspec
import numpy as np
import pytest
import tomlkit

from specmon.engine import rounds as rounds_module
from specmon.engine.drafters import Proposal
from specmon.engine.driver import SessionDriver
from specmon.engine.prompts import Prompt, builtin_suite
from specmon.events.frames import frame, preamble
from specmon.events.log import read_log
from specmon.events.schema import Decision, RoundVerified, Sampling
from specmon.metrics import rates
from specmon.policy.classify import classify
from specmon.policy.decide import Row, decide
from specmon.policy.edit import set_value
from specmon.policy.engine import PolicyEngine
from specmon.policy.explain import explain_log
from specmon.policy.schema import PolicyError, load_policy, parse_policy
from specmon.sched.policy import PolicyScheduler

REPO = Path(__file__).resolve().parent.parent
DEFAULT = REPO / "policies" / "default.toml"
FIXTURE = REPO / "tests" / "fixtures" / "session-policy.specmon"
RATIO = REPO / "tests" / "fixtures" / "policy-ratio.toml"  # the default before intervals: decides on the ratio alone
OK_CLASS = '[[classes]]\nname = "all"\ndefault = true\n'

# (policy text, line the error must name, a fragment of the reason)
MALFORMED = [
    ("[policy]\nmode = 'enforce\n" + OK_CLASS, 2, "invalid TOML"),
    ("[policy]\nmodee = 'enforce'\n" + OK_CLASS, 2, "unknown field `modee`"),
    ("[policy]\nmode = 'sometimes'\n" + OK_CLASS, 2, "policy.mode: Invalid enum value 'sometimes' (one of: enforce, advise)"),
    ("[policy]\n\nmin_gain = 'big'\n" + OK_CLASS, 3, "Expected `float`"),
    ("[policy]\nevidence_window = 0\n" + OK_CLASS, 2, "evidence_window = 0 is out of range"),
    ("[policy]\nevidence_window = 8\nmin_rounds = 9\n" + OK_CLASS, 3, "min_rounds = 9 is out of range"),
    ("[policy]\nhysteresis = -0.1\n" + OK_CLASS, 2, "hysteresis"),
    ("[policy]\n\nprompt_off = -0.5\n" + OK_CLASS, 3, "prompt_off = -0.5 is out of range: 0 (never) or a positive number below 10"),
    ("[polcy]\nmode = 'advise'\n" + OK_CLASS, 1, "unknown field `polcy`"),
    (OK_CLASS + "speculate = 'maybe'\n", 4, "Invalid enum value 'maybe'"),
    (OK_CLASS + "draft_len = { min = 5, max = 2 }\n", 4, "range"),
    (OK_CLASS + "draft_len = 99\n", 4, "draft_len = 99"),
    (OK_CLASS + "ngram = { min_match = 2.5 }\n", 4, "classes[0].ngram.min_match: Expected `int`, got `float`"),
    (OK_CLASS + "ngram = { min_seen = 0 }\n", 4, "ngram.min_seen = 0 must be 1..100"),
    (OK_CLASS + "draft_len = { min = 1, max = 4, adapt = 'acceptance' }\n", 4, "Invalid enum value 'acceptance'"),
    ('[[classes]]\nname = "code"\nmatch.regex = ["(unclosed"]\n' + OK_CLASS, 3, "bad regular expression"),
    ('[[classes]]\nname = "code"\nmatch.keyword = ["def"]\n' + OK_CLASS, 3, "unknown field `keyword`"),
    ('[[classes]]\nname = "x"\nmatch.script = ["klingon"]\n' + OK_CLASS, 3, "Invalid enum value 'klingon'"),
    ('[[classes]]\nname = "all"\nmatch.keywords = ["a"]\n' + OK_CLASS, 5, "used twice"),
    ('[[classes]]\nname = "only"\nmatch.keywords = ["a"]\n', 1, "no class has default = true"),
    ("[policy]\nmode = 'advise'\n", 1, "no [[classes]]"),
    (OK_CLASS + "\n[[classes]]\nname = 'x'\nmatch.min_chars = 10\nmatch.max_chars = 5\n", 8, "max_chars < min_chars"),
]


@pytest.mark.parametrize("text,line,reason", MALFORMED, ids=[f"case{i}" for i in range(len(MALFORMED))])
def test_malformed_policies_are_refused_at_the_right_line(text, line, reason):
    with pytest.raises(PolicyError) as error:
        parse_policy(text, "p.toml")
    assert error.value.line == line, str(error.value)
    assert reason in str(error.value)
    assert re.match(rf"p\.toml:{line}:\d+: ", str(error.value))


def test_unreachable_and_overlapping_classes_are_warned():
    text = (OK_CLASS + '[[classes]]\nname = "late"\nmatch.keywords = ["x"]\n'
            '[[classes]]\nname = "later"\nmatch.keywords = ["X"]\n')
    warnings = parse_policy(text, "p.toml").warnings
    assert any("'late' is unreachable" in w and w.startswith("p.toml:4:") for w in warnings)
    assert any("'later' overlaps 'late'" in w for w in warnings)


def test_default_policy_is_valid_and_round_trips_byte_for_byte():
    text = DEFAULT.read_text()
    assert load_policy(DEFAULT).warnings == []
    assert tomlkit.dumps(tomlkit.parse(text)) == text


def test_set_keeps_every_comment_and_refuses_an_invalid_edit(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(DEFAULT.read_text())
    comments = re.findall(r"#.*", DEFAULT.read_text())
    set_value(path, "policy.min_gain", "0.08")
    set_value(path, "classes.chat.speculate", "off")
    set_value(path, "classes[1].draft_len", "6")
    edited = path.read_text()
    assert re.findall(r"#.*", edited) == comments
    policy = load_policy(path)
    assert policy.settings.min_gain == 0.08
    assert policy.classes[-1].speculate == "off" and policy.classes[1].draft_len == 6
    with pytest.raises(PolicyError, match="min_rounds = 0 is out of range"):
        set_value(path, "policy.min_rounds", "0")
    assert path.read_text() == edited  # refused: the file is untouched


def test_hot_reload_takes_a_valid_edit_and_refuses_a_bad_one(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(DEFAULT.read_text())
    engine = PolicyEngine(load_policy(path), "s")
    old = engine.policy
    path.write_text(DEFAULT.read_text().replace('mode = "enforce"', 'mode = "sometimes"'))
    _bump_mtime(path)
    refused = engine.maybe_reload()
    line = DEFAULT.read_text().splitlines().index('mode = "enforce"          # "enforce" | "advise"') + 1
    assert refused is not None and not refused.accepted and f"{path}:{line}:" in refused.error
    assert engine.policy is old  # the policy in force stays in force
    path.write_text(DEFAULT.read_text().replace("min_gain = 0.03", "min_gain = 0.10"))
    _bump_mtime(path)
    taken = engine.maybe_reload()
    assert taken.accepted and engine.policy.settings.min_gain == 0.10 and taken.sha256 != old.sha256
    assert engine.maybe_reload() is None  # unchanged file: nothing to do


def _bump_mtime(path: Path) -> None:
    later = time.time() + 5
    os.utime(path, (later, later))


def test_builtin_prompts_are_classified_by_what_they_give_not_their_wording():
    policy = load_policy(DEFAULT)
    got = [(p.prompt_class, *classify(policy, p.text)) for p in builtin_suite()]
    # new code has nothing to copy and lands with chat; the German prompt is plain ASCII
    expect = {"chat": "chat", "code-new": "chat", "code-edit": "code-edit", "rewrite": "rewrite",
              "non-english": "non-english"}
    agree = sum(expect[want] == name for want, name, _ in got)
    assert agree == 19
    assert all(re.fullmatch(r"classes\[\d\]\.(match\.\w+|default) \(line \d+\)", rule) for _, _, rule in got)
    assert not any("regex" in rule or "keywords" in rule for _, _, rule in got)  # no English words decide


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
    assert decide(True, 3, rows(0, 2, 1, 40.0) + rows(3, 5, 3, 60.0, start=100)
                  + rows(4, 5, 3, 60.0 / 1.1, start=200), damped).k == 4  # 10% > k_gain
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
    assert decide(True, 7, plain + hard + easy7 + easy6, {**T, "k_gain": 0.08, "k_max": 8.0,
                                                          "min_rounds": 4.0}).k == 6  # a log from before
    better6 = [Row(300 + i, 6, 6, 45.0, "easy") for i in range(4)]  # 1.33x k=7 on the same text
    out = decide(True, 7, plain + hard + easy7 + better6, {**paired, "min_rounds": 4.0})
    assert (out.k, out.rule) == (6, "draft_len")
    assert out.inputs["ratio"] == pytest.approx((6 / 45) / (6 / 60))
    assert out.round_ids == sorted(r.round_id for r in plain + hard + easy7 + better6)


def test_decide_waits_for_min_rounds():
    assert decide(True, 4, rows(0, 3, 1, 40.0) + rows(4, 9, 2, 40.0, start=50), T) is None


def test_explain_reproduces_every_decision_of_a_recorded_session():
    explanations = explain_log(FIXTURE)
    assert explanations and all(e.reproduces for e in explanations), [e.detail for e in explanations]


def test_explain_reports_a_mismatch_when_one_cited_round_is_altered(tmp_path):
    events = list(read_log(FIXTURE))
    decision = next(e for e in events if isinstance(e, Decision))
    victim = decision.round_ids[0]
    altered = tmp_path / "altered.specmon"
    with open(altered, "wb") as fh:
        fh.write(preamble())
        for ev in events:
            if isinstance(ev, RoundVerified) and ev.round_id == victim:
                ev = msgspec.structs.replace(ev, verify_ms=ev.verify_ms * 50)
            fh.write(frame(ev))
    explanations = {e.decision.decision_id: e for e in explain_log(altered)}
    assert not explanations[decision.decision_id].reproduces
    assert all(e.reproduces for i, e in explanations.items() if victim not in e.decision.round_ids)


DRAFT, CORRECTION, EOS = 1, 2, 0  # the scripted pair's only tokens
# "rewrite" by its keyword under the ratio policy, by the passage it gives under the default
TEXTS = {"rewrite": "Rewrite this in simpler words:\n\nThe council met on Tuesday to discuss the new bicycle lanes. "
                    "Residents said the lanes made the street safer; shop owners worried about parking.",
         "chat": "Why is the sky blue?"}


class ScriptedClock:
    """The round loop's timer, advanced only by the scripted target's verify pass."""

    def __init__(self):
        self.seconds = 0.0

    def perf_counter(self) -> float:
        return self.seconds

    def time(self) -> float:
        return time.time()  # event timestamps stay wall-clock


class ScriptedTarget:
    """A target whose verify pass accepts `emitted` - 1 draft tokens (or all of them, if fewer) in
    20 ms, so k = `emitted` - 1 is `speedup` x plain's goodput: a plain step (nothing drafted)
    takes 20 * speedup / emitted ms. Its `rounds`-th round of a prompt ends it with EOS."""

    name, vocab_size, max_len, eos_id = "scripted", 3, 1 << 20, EOS

    def __init__(self, clock: ScriptedClock):
        self.clock = clock
        self.rounds, self.speedup, self.emitted, self.round = 40, 1.5, 3, 0

    def round_ms(self, draft_len: int) -> float:
        return 20.0 if draft_len else 20.0 * self.speedup / self.emitted

    def prefill(self, tokens) -> None:
        self.round = 0

    def forward(self, tokens, start) -> np.ndarray:
        self.round += 1
        drafted = len(tokens) - 1
        accepted = min(self.emitted - 1, drafted)
        logits = np.zeros((len(tokens), self.vocab_size))
        logits[:accepted, DRAFT] = 1.0
        logits[accepted, EOS if self.round == self.rounds else CORRECTION] = 1.0
        self.clock.seconds += self.round_ms(drafted) / 1e3
        return logits

    def truncate(self, length: int) -> None:
        pass

    def memory_bytes(self) -> int:
        return 0

    def cache_bytes(self) -> dict[str, int]:
        return {}


class RepeatDrafter:
    """Proposes k copies of the one draft token: the target alone decides how many are accepted.
    With `silent_every` = n, every nth proposal of a prompt is empty, as a confident drafter's
    with no match: that round is one plain step."""

    name = "scripted"

    def __init__(self, silent_every: int = 0):
        self.silent_every, self.calls = silent_every, 0

    def begin(self, prompt) -> None:
        self.calls = 0

    def propose(self, context, k, sampling, rng) -> Proposal:
        self.calls += 1
        silent = self.silent_every and self.calls % self.silent_every == 0
        return Proposal([] if silent else [DRAFT] * k, None)


class ScriptedTokenizer:
    def encode_chat(self, user_text: str) -> list[int]:
        return [CORRECTION, CORRECTION]

    def decode(self, ids: list[int]) -> str:
        return "".join({EOS: "</s>", DRAFT: "d", CORRECTION: "c"}[i] for i in ids)


class PlanRecorder(PolicyEngine):
    """The policy engine, keeping each plan it makes so a test can read what it scheduled."""

    def __init__(self, policy, session_id):
        super().__init__(policy, session_id)
        self.plans = []

    def plan(self, name: str):
        plan = super().plan(name)
        self.plans.append(plan)
        return plan


class PolicySession:
    """The live path on the scripted pair: PolicyScheduler feeding a SessionDriver, round by round."""

    def __init__(self, policy, clock: ScriptedClock, silent_every: int = 0):
        self.events: list = []
        self.target = ScriptedTarget(clock)
        self.engine = PlanRecorder(policy, "s")
        driver = SessionDriver("s", self.target, ScriptedTokenizer(), self.events.append, near_tie_margin=0.0)
        self.scheduler = PolicyScheduler(driver, self.engine, RepeatDrafter(silent_every))
        self.prompts = 0

    def prompt(self, name, rounds=40, speedup=1.5, emitted=3):
        """Decode one prompt of class `name`; its plan, each round's k and the decisions it emitted."""
        self.target.rounds, self.target.speedup, self.target.emitted = rounds, speedup, emitted
        self.prompts += 1
        start = len(self.events)
        done = self.scheduler.decode(Prompt(f"p{self.prompts}", TEXTS[name], "default"), Sampling(), 10_000)
        new = self.events[start:]
        played = [e for e in new if isinstance(e, RoundVerified)]
        assert done.started.prompt_class == name and done.run.stop_reason == "eos" and len(played) == rounds
        for ev in played:  # the evidence is what the driver timed, and what the script says
            assert len(ev.emitted) == (min(emitted, ev.draft_len + 1) if ev.proposed else 1)
            assert rates.round_ms(ev) == pytest.approx(self.target.round_ms(len(ev.proposed)))
        return self.engine.plans[-1], [e.draft_len for e in played], [e for e in new if isinstance(e, Decision)]


@pytest.fixture
def session(monkeypatch):
    """A new policy session per call, its round loop timed by the scripted clock."""
    clock = ScriptedClock()
    monkeypatch.setattr(rounds_module, "time", clock)
    return lambda policy: PolicySession(policy, clock)


def test_plain_is_remeasured_in_short_runs_that_thin_out_while_the_decision_holds(session):
    policy = parse_policy(RATIO.read_text(), "default.toml")
    live = session(policy)
    first, ks, decisions = live.prompt("rewrite", speedup=1.2)
    start, plain = first.k, policy.settings.plain_rounds
    # the first prompt measures both: plain_rounds plain rounds, then speculation at the start k
    assert first.lead == (0, plain) and ks == [0] * plain + [start] * (40 - plain) and decisions == []
    plans = [live.prompt("rewrite", speedup=1.2)[0] for _ in range(200)]
    remeasures = [i + 2 for i, p in enumerate(plans) if p.lead and p.lead[0] == 0]
    gaps = [b - a for a, b in zip([1] + remeasures, remeasures)]
    base = policy.settings.remeasure_every
    assert gaps[:4] == [base, 2 * base, 4 * base, 8 * base]  # doubling while the decision holds,
    assert all(g == 8 * base for g in gaps[4:])  # capped at 8x
    assert all(p.lead[1] == (plain if p.lead[0] == 0 else 16) for p in plans if p.lead)  # short runs only
    probes = [p.lead[0] for p in plans if p.lead and p.lead[0]]
    others = [k for k in range(2, 9) if k != start]
    at = [i + 2 for i, p in enumerate(plans) if p.lead and p.lead[0]]
    every = policy.settings.probe_every
    assert [b - a for a, b in zip([1] + at, at)][:5] == [every, 2 * every, 4 * every, 8 * every, 8 * every]
    # every other k in range is tried once, nearest first, before any is tried again
    assert sorted(probes[: len(others)]) == others
    assert [abs(k - start) for k in probes[: len(others)]] == sorted(abs(k - start) for k in others)


def test_plain_is_remeasured_at_the_longest_gap_while_speculation_is_far_ahead(session):
    policy = parse_policy(RATIO.read_text(), "default.toml")
    live = session(policy)
    plans = [live.prompt("rewrite", speedup=1.5)[0] for _ in range(120)]  # 1.5 > 1.08 x 1.25
    remeasures = [i + 1 for i, p in enumerate(plans) if p.lead and p.lead[0] == 0]
    assert remeasures == [1, 1 + 8 * policy.settings.remeasure_every, 1 + 16 * policy.settings.remeasure_every]


def test_a_probe_cut_short_by_the_end_of_a_prompt_is_finished_first(session):
    policy = parse_policy(RATIO.read_text(), "default.toml")
    live = session(policy)
    plans = [live.prompt("rewrite", rounds=10)[0] for _ in range(40)]
    probes = [p.lead for p in plans if p.lead and p.lead[0]]
    # a probe alternates k=6 with the class's k=7; 10-round prompts end it after 5 rounds at k=6,
    # so the next prompts finish that k's 16 at once
    assert probes[:3] == [(6, 16), (6, 11), (6, 6)]
    at = [i for i, p in enumerate(plans) if p.lead and p.lead[0]]
    assert at[1:3] == [at[0] + 1, at[0] + 2] and all(p.alternate for p in plans if p.lead and p.lead[0])


def test_a_narrowly_losing_class_goes_off_at_min_rounds_and_then_only_probes_its_cheapest_k(session):
    policy = parse_policy(RATIO.read_text(), "default.toml")
    live = session(policy)
    first, ks, decisions = live.prompt("chat", speedup=0.97, emitted=2)
    (decision,) = decisions
    assert (decision.speculate_from, decision.speculate_to) == (True, False)
    # 8 plain rounds, 16 at k (a 3% loss passes the early test), the decision, the rest plain
    assert ks == [0] * 8 + [first.k] * 16 + [0] * 16
    assert decision.inputs["ratio"] == pytest.approx(0.97)
    plans = [live.prompt("chat", speedup=0.97, emitted=2)[0] for _ in range(30)]
    assert all(p.k == 0 for p in plans)
    probes = [i + 2 for i, p in enumerate(plans) if p.lead]  # prompt numbers, the first prompt being 1
    every = policy.settings.probe_every
    assert [b - a for a, b in zip([1] + probes, probes)] == [every, 2 * every, 4 * every]  # backing off
    k_min = policy.classes[-1].draft_len.min
    assert all(p.lead == (k_min, 4) for p in plans if p.lead)  # the cheapest k, 4 rounds: it cannot pay


def test_a_draft_length_that_loses_by_far_is_switched_off_after_four_rounds(session):
    policy = parse_policy(RATIO.read_text(), "default.toml")
    live = session(policy)
    first, ks, (decision,) = live.prompt("rewrite", speedup=0.5)
    plain = policy.settings.plain_rounds
    assert ks == [0] * plain + [first.k] * 4 + [0] * (40 - plain - 4)  # not min_rounds
    k = first.k
    assert decision.inputs[f"goodput_k{k}"] / decision.inputs["goodput_k0"] == pytest.approx(0.5)
    # even were 2 more rounds to emit k + 1 tokens: (4 * 3 + 2 * 8) / 6 rounds, against plain's 6 per 20 ms
    assert decision.inputs["ratio"] == pytest.approx((4 * 3 + 2 * (k + 1)) / 6 / 6)
    assert len(decision.round_ids) == plain + 4


def test_a_class_switched_off_comes_back_on_when_its_probes_win(session):
    policy = parse_policy(RATIO.read_text(), "default.toml")
    live = session(policy)
    live.prompt("chat", speedup=0.5)
    assert not live.engine.state("chat").speculate
    plans, found = [], []
    for _ in range(6):
        plan, ks, decisions = live.prompt("chat", speedup=2.0, emitted=2)
        plans.append(plan)
        found += decisions
    k_min = policy.classes[-1].draft_len.min
    # prompt 5 probes the cheapest k for 4 rounds; they could pay, so prompt 6 finishes its 16
    assert [p.lead for p in plans[:5]] == [None, None, None, (k_min, 4), (k_min, 12)]
    on = found[0]
    assert (on.speculate_to, on.k_to, on.rule_key) == (True, k_min, "policy.hysteresis")
    assert plans[5].k == k_min


def test_a_run_looks_at_its_policy_file_at_a_prompts_start_once_a_quarter_second_passed(tmp_path):
    """A look is a stat: one per prompt of a fast prompt set at most every poll_s, never between rounds."""
    from types import SimpleNamespace

    from specmon.events.schema import PolicyLoaded

    path = tmp_path / "p.toml"
    path.write_text(DEFAULT.read_text())
    emitted: list = []
    driver = SimpleNamespace(session_id="s", emit=emitted.append)
    engine = PolicyEngine(load_policy(path), "s")
    scheduler = PolicyScheduler(driver, engine, None, on_reload=None, poll_s=0.25)
    loads = lambda: [e for e in emitted if isinstance(e, PolicyLoaded)]  # noqa: E731

    def edit(gain: str) -> None:
        path.write_text(DEFAULT.read_text().replace("min_gain = 0.03", f"min_gain = {gain}"))
        os.utime(path, ns=(time.time_ns(), time.time_ns() + int(gain[-1]) * 10**9))  # a new stamp, whatever the clock

    scheduler.look(driver, now=10.0)  # a prompt starts: looked
    edit("0.01")
    scheduler.look(driver, now=10.2)  # the next prompt, too soon
    assert len(loads()) == 1  # only the session's first
    scheduler.look(driver, now=10.25)
    assert len(loads()) == 2 and engine.policy.settings.min_gain == 0.01
    assert loads()[1].changed == ["policy"] and [c.name for c in loads()[1].classes] == [
        c.name for c in engine.policy.classes]
    scheduler.poll_s = 0.0  # SPECMON_POLICY_POLL_S=0: every prompt looks
    edit("0.04")
    scheduler.look(driver, now=10.25)
    assert len(loads()) == 3 and engine.policy.settings.min_gain == 0.04


def test_a_server_request_is_planned_by_the_policy_in_force_however_short_the_requests(tmp_path):
    """An edit made before a request's turn is in force for it; a class it names that the edit
    removed is refused (UnknownClass, the server's 400), not decoded under another class."""
    from types import SimpleNamespace

    from specmon.events.schema import PolicyLoaded
    from specmon.policy.classify import UnknownClass

    path = tmp_path / "p.toml"
    path.write_text(DEFAULT.read_text())
    emitted: list = []
    decoded: list = []

    def decode_steps(*args, **options):
        decoded.append((options["prompt_class"], options["class_rule"]))
        return options
        yield

    driver = SimpleNamespace(session_id="s", emit=emitted.append, decode_steps=decode_steps,
                             finish=lambda *a: None, sample_resources=lambda: None)
    engine = PolicyEngine(load_policy(path), "s")
    server = PolicyScheduler(driver, engine, None, on_reload=None, poll_s=0.25)
    path.write_text(DEFAULT.read_text().replace("min_gain = 0.03", "min_gain = 0.01")
                    .replace('name = "rewrite"', 'name = "rw"'))
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    with pytest.raises(UnknownClass, match="'rewrite'"):
        server.decode(Prompt("r1", "hi", "default"), Sampling(), 4, named="rewrite")
    assert [e.accepted for e in emitted if isinstance(e, PolicyLoaded)] == [True, True]
    assert engine.policy.settings.min_gain == 0.01 and decoded == []
    server.decode(Prompt("r2", "hi", "default"), Sampling(), 4, named="rw")
    assert decoded == [("rw", "named by the request (classes[1].name); "
                       "k=8: measuring speculation; its rounds that draft nothing measure plain decoding")]


def test_the_shipped_prompt_sets_cover_twelve_task_types_and_share_no_prompt():
    from collections import Counter

    from specmon.engine.prompts import load_prompts
    from specmon.sched.bench import prompt_half, shipped_prompts

    bench, holdout = (load_prompts(shipped_prompts(name)) for name in ("bench", "holdout"))
    types = Counter(p.prompt_class for p in bench)
    assert len(bench) == 72 and len(types) == 12 and set(types.values()) == {6}
    assert Counter(prompt_half(p.id) for p in bench) == {"tune": 36, "test": 36}
    assert Counter(p.prompt_class for p in holdout) == {t: 4 for t in types}  # the same task types, 4 each
    assert not {p.text for p in bench} & {p.text for p in holdout}
    assert not {p.id for p in bench} & {p.id for p in holdout}


def test_an_edit_made_while_the_model_loads_is_a_reload_at_the_first_prompt(tmp_path):
    """The file's stamp is taken when the policy is read, not when the engine starts after the model loads."""
    path = tmp_path / "p.toml"
    path.write_text(DEFAULT.read_text())
    policy = load_policy(path)
    path.write_text(DEFAULT.read_text().replace("min_gain = 0.03", "min_gain = 0.01"))
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    engine = PolicyEngine(policy, "s")  # the model has loaded meanwhile
    reloaded = engine.maybe_reload()
    assert reloaded is not None and reloaded.accepted and engine.policy.settings.min_gain == 0.01
