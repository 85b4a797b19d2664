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
from specmon.engine.costs import Costs
from specmon.events.log import LogWriter
from specmon.events.schema import ClassInForce, Decision, RoundVerified, Sampling
from specmon.metrics import rates
from specmon.policy.classify import classify
from specmon.policy import gate
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
    (
        "[policy]\nmode = 'sometimes'\n" + OK_CLASS,
        2,
        "policy.mode: Invalid enum value 'sometimes' (one of: enforce, advise)",
    ),
    ("[policy]\n\nmin_gain = 'big'\n" + OK_CLASS, 3, "Expected `float`"),
    ("[policy]\nwindow = 0\n" + OK_CLASS, 2, "window = 0 is out of range: 1..10000"),
    ("[policy]\n\nmin_gain = -1.5\n" + OK_CLASS, 3, "min_gain = -1.5 is out of range"),
    ("[policy]\nwindow = 1.5\n" + OK_CLASS, 2, "Expected `int`, got `float`"),
    ("[polcy]\nmode = 'advise'\n" + OK_CLASS, 1, "unknown field `polcy`"),
    (OK_CLASS + "speculate = 'maybe'\n", 4, "Invalid enum value 'maybe'"),
    (OK_CLASS + "draft_len = -1\n", 4, "draft_len = -1 must be 0..64"),
    (OK_CLASS + "draft_len = 99\n", 4, "draft_len = 99"),
    (OK_CLASS + "draft_len = 'long'\n", 4, "classes[0].draft_len: Expected `int`, got `str`"),
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
    text = (
        OK_CLASS + '[[classes]]\nname = "late"\nmatch.keywords = ["x"]\n'
        '[[classes]]\nname = "later"\nmatch.keywords = ["X"]\n'
    )
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
    with pytest.raises(PolicyError, match="window = 0 is out of range"):
        set_value(path, "policy.window", "0")
    assert path.read_text() == edited  # refused: the file is untouched


def test_hot_reload_takes_a_valid_edit_and_refuses_a_bad_one(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(DEFAULT.read_text())
    engine = PolicyEngine(load_policy(path), "s", STEEP)
    old = engine.policy
    path.write_text(DEFAULT.read_text().replace('mode = "enforce"', 'mode = "sometimes"'))
    _bump_mtime(path)
    refused = engine.maybe_reload()
    line = next(i for i, ln in enumerate(DEFAULT.read_text().splitlines(), 1) if ln.startswith('mode = "enforce"'))
    assert refused is not None and not refused.accepted and f"{path}:{line}:" in refused.error
    assert engine.policy is old  # the policy in force stays in force
    path.write_text(DEFAULT.read_text().replace("min_gain = 0.02", "min_gain = 0.10"))
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
    expect = {
        "chat": "chat",
        "code-new": "chat",
        "code-edit": "code-edit",
        "rewrite": "rewrite",
        "non-english": "non-english",
    }
    agree = sum(expect[want] == name for want, name, _ in got)
    assert agree == 19
    assert all(re.fullmatch(r"classes\[\d\]\.(match\.\w+|default) \(line \d+\)", rule) for _, _, rule in got)
    assert not any("regex" in rule or "keywords" in rule for _, _, rule in got)  # no English words decide


DRAFT, CORRECTION, EOS = 1, 2, 0  # the scripted pair's only tokens
# "rewrite" by its keyword under the ratio policy, by the passage it gives under the default
TEXTS = {
    "rewrite": "Rewrite this in simpler words:\n\nThe council met on Tuesday to discuss the new bicycle lanes. "
    "Residents said the lanes made the street safer; shop owners worried about parking.",
    "chat": "Why is the sky blue?",
}


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
    """Proposes k copies of the one draft token, as after a 2-token n-gram match: the target
    alone decides how many are accepted."""

    name = "scripted"

    def begin(self, prompt) -> None:
        pass

    def propose(self, context, k, sampling, rng) -> Proposal:
        return Proposal([DRAFT] * k, None, matched=2)


class ScriptedTokenizer:
    def encode_chat(self, user_text: str) -> list[int]:
        return [CORRECTION, CORRECTION]

    def decode(self, ids: list[int]) -> str:
        return "".join({EOS: "</s>", DRAFT: "d", CORRECTION: "c"}[i] for i in ids)


class PolicySession:
    """The live path on the scripted pair: PolicyScheduler feeding a SessionDriver, round by round."""

    def __init__(self, policy, clock: ScriptedClock, costs: Costs, shelf=None, session_id="s"):
        self.events: list = []
        self.target = ScriptedTarget(clock)
        self.engine = PolicyEngine(policy, session_id, costs, shelf)
        driver = SessionDriver(session_id, self.target, ScriptedTokenizer(), self.events.append, near_tie_margin=0.0)
        self.scheduler = PolicyScheduler(driver, self.engine, RepeatDrafter(), on_reload=None)
        self.prompts = 0

    def prompt(self, name, rounds=40, speedup=1.5, emitted=3):
        """Decode one prompt of class `name`; each round's verified draft length and the decisions it emitted."""
        self.target.rounds, self.target.speedup, self.target.emitted = rounds, speedup, emitted
        self.prompts += 1
        start = len(self.events)
        done = self.scheduler.decode(Prompt(f"p{self.prompts}", TEXTS[name], "default"), Sampling(), 10_000)
        new = self.events[start:]
        played = [e for e in new if isinstance(e, RoundVerified)]
        assert done.started.prompt_class == name and done.run.stop_reason == "eos" and len(played) == rounds
        for ev in played:  # the evidence is what the driver timed, and what the script says
            assert len(ev.emitted) == min(emitted, len(ev.proposed) + 1)
            assert rates.round_ms(ev) == pytest.approx(self.target.round_ms(len(ev.proposed)))
        return [len(e.proposed) for e in played], [e for e in new if isinstance(e, Decision)]


STEEP = Costs((10.0, 12.8, 17.2, 21.2, 26.0, 29.8, 33.7, 36.6, 43.1))  # llama.cpp's curve on 2 cores
FLAT = Costs((10.0,) + (16.0,) * 8)  # torch's packed verify: any draft costs one padded pass
ONE_CLASS = '[policy]\nmode = "{mode}"\n[[classes]]\nname = "chat"\ndefault = true\nspeculate = "{speculate}"\n'


def test_a_draft_position_counts_once_up_to_the_first_rejection_at_its_reach():
    counts = gate.counts_of([gate.Draft(0, "c", proposed=5, accepted=3, matched=2)])
    # positions 1-4 continue matches of 2, 3, 4 and 5 tokens (5 is bucket 5); the 5th was never judged
    assert counts.tried == [0, 0, 1, 1, 1, 1, 0, 0] and counts.taken == [0, 0, 1, 1, 1, 0, 0, 0]
    model = gate.counts_of([gate.Draft(1, "c", proposed=3, accepted=3, matched=0)])  # a model drafter: by position
    assert model.tried == [1, 1, 1, 0, 0, 0, 0, 0] and model.taken == [1, 1, 1, 0, 0, 0, 0, 0]


def test_a_draft_is_cut_to_the_length_whose_expected_goodput_is_best_on_this_engines_curve():
    coin = [0.5] * gate.BUCKETS  # a coin at every reach
    steep = gate.cut_table(coin, [STEEP.steps(j) for j in range(9)], 0.02)
    flat = gate.cut_table(coin, [FLAT.steps(j) for j in range(9)], 0.02)
    # steep: 1.5 tokens for 1.28 steps pays, 1.75 for 1.72 does not by 2%; flat: 1.6 steps for any draft
    assert steep[3] == (0, 1, 1, 1, 1, 1, 1, 1, 1)
    assert flat[3] == (0, 0, 2, 3, 4, 5, 6, 7, 8)  # (1 + .5 + .25) / 1.6 = 1.09: two tokens already pay
    assert gate.summary(steep) == (True, 1, 2) and gate.summary(flat) == (True, 8, 2)  # from a 2-token match
    assert gate.summary(gate.cut_table([0.1] * gate.BUCKETS, [STEEP.steps(j) for j in range(9)], 0.02)) == (False, 0, 0)


@pytest.fixture
def session(monkeypatch):
    """A new policy session per call, its round loop timed by the scripted clock."""
    clock = ScriptedClock()
    monkeypatch.setattr(rounds_module, "time", clock)
    return lambda policy, costs, **memory: PolicySession(policy, clock, costs, **memory)


def test_drafts_that_fail_on_a_steep_engine_are_cut_to_plain_steps_and_explain_recomputes_it(session, tmp_path):
    live = session(parse_policy(ONE_CLASS.format(mode="enforce", speculate="auto")), STEEP)
    verified, decisions = live.prompt("chat", rounds=30, emitted=1)  # every draft token is rejected
    # the prior (3/5 after a 2-token match) verifies one token: 1.6 for 1.28 steps; 4 rejections there
    # make the session's rate (0 + 3/5 * 4) / (4 + 4) and the class's 8 * that / (4 + 8) = 1/5, and
    # 1.2 < 1.28: a 2-token match drafts no more; a longer one, never seen, still may
    assert verified == [1] * gate.CHECK_EVERY + [0] * (30 - gate.CHECK_EVERY)
    (decision,) = decisions
    assert (decision.speculate_to, decision.k_from, decision.k_to) == (True, 3, 3)  # after a long match, 3
    assert (decision.match_from, decision.match_to) == (2, 3) and "2: 1->0" in decision.reason
    assert decision.gate.rates[2] == pytest.approx(1 / 5) and decision.gate.tried[2] == 4
    assert decision.round_ids == list(range(gate.CHECK_EVERY)) and decision.gate.steps[8] == pytest.approx(4.31)
    log = tmp_path / "s.specmon"
    with LogWriter(log) as writer:
        for ev in live.events:
            writer.write(ev)
    (explained,) = explain_log(log)
    assert explained.reproduces, explained.detail
    # one cited round altered as the live rule reads it (its first token accepted): explain says so
    altered = tmp_path / "altered.specmon"
    with LogWriter(altered) as writer:
        for ev in live.events:
            victim = isinstance(ev, RoundVerified) and ev.round_id == decision.round_ids[1]
            writer.write(msgspec.structs.replace(ev, accepted=1) if victim else ev)
    (explained,) = explain_log(altered)
    assert not explained.reproduces and explained.detail.startswith(("recomputed:", "inputs differ:")), explained.detail


def test_drafts_that_copy_on_a_flat_engine_keep_their_whole_length(session):
    live = session(parse_policy(ONE_CLASS.format(mode="enforce", speculate="auto")), FLAT)
    verified, decisions = live.prompt("chat", rounds=30, emitted=9)  # every draft token is accepted
    assert verified == [8] * 30  # a whole draft pays from the start; what it learns only lengthens shorter ones
    assert all((d.speculate_to, d.k_to, d.match_to) == (True, 8, 2) for d in decisions)
    assert live.engine.class_in_force("chat") == ClassInForce("chat", True, 8, 2)


@pytest.mark.parametrize(
    "mode,speculate,drafted,decided",
    [
        ("enforce", "on", 8, 0),  # on: always draft_len, nothing learned
        ("enforce", "off", 0, 0),  # off: plain steps
        ("advise", "auto", 8, 1),  # advise: the decision is logged, unapplied; drafts stay whole
    ],
)
def test_on_off_and_advise_run_as_the_file_says(session, mode, speculate, drafted, decided):
    live = session(parse_policy(ONE_CLASS.format(mode=mode, speculate=speculate)), STEEP)
    verified, decisions = live.prompt("chat", rounds=20, emitted=1)
    assert verified == [drafted] * 20 and len(decisions) == decided
    assert all(not d.applied for d in decisions) or mode == "enforce"


def test_a_model_drafter_is_asked_only_for_the_tokens_its_class_verifies():
    costs = Costs(FLAT.verify_ms, draft_ms=1.5)  # each draft token costs 0.15 of a plain step
    engine = PolicyEngine(parse_policy(ONE_CLASS.format(mode="enforce", speculate="auto")), "s", costs)
    # by a model drafter's prior, position i is accepted after the ones before it with odds i / (i + 1),
    # the first i with 1 / (i + 1): (1 + 1/2 + 1/3 + 1/4 + 1/5 + 1/6) / (1.6 + 5 * 0.15) = 1.043 is the best j
    assert engine.draft_len("chat") == 5 and engine.class_in_force("chat") == ClassInForce("chat", True, 5, 0)
    assert PolicyEngine(engine.policy, "s", FLAT).draft_len("chat") == 8  # a free drafter is asked for 8, then cut


def engine_at(two_positions: float, draft_ms: float = 0.0) -> Costs:
    """An engine whose 2-position verify costs `two_positions` plain steps, and each position after
    that as much again (a CPU's curve: llama.cpp's STEEP is 1.28, 1.72, 2.12, ...)."""
    return Costs(tuple(10.0 + 10.0 * (two_positions - 1) * t for t in range(9)), draft_ms=draft_ms)


@pytest.mark.parametrize("draft_ms", [0.0, 0.5], ids=["n-gram", "model"])
def test_before_any_round_a_class_drafts_what_the_engines_curve_and_the_prior_pay_and_less_on_a_dearer_engine(
    draft_ms,
):
    policy = parse_policy(ONE_CLASS.format(mode="enforce", speculate="auto"))
    dearer = [1.0, 1.05, 1.2, 1.35, 1.5, 1.75, 2.0, 2.5]
    engines = [PolicyEngine(policy, "s", engine_at(s, draft_ms)) for s in dearer]
    tables = [e.state("chat").table for e in engines]
    for cheaper, dear in zip(tables, tables[1:]):  # one rule for every engine: a dearer one verifies no draft more
        assert all(d <= c for rc, rd in zip(cheaper, dear) for c, d in zip(rc, rd))
    opening = dict(zip(dearer, (e.class_in_force("chat") for e in engines)))
    assert opening[1.05].speculate and opening[1.05].draft_len > 1  # nearly free to verify: it starts drafting
    assert not opening[2.5].speculate  # no draft of the prior's pays 1.5 steps a position: it starts plain
    if draft_ms:  # a model draft's first token is accepted by the prior at 1/2: 1.5 tokens do not pay 1.5 steps
        assert not opening[1.5].speculate and opening[1.2].speculate
    else:  # an n-gram draft after a 2-token match is, at 3/5: 1.6 tokens pay 1.5 steps, 2.24 do not pay 2
        assert gate.kept(tables[dearer.index(1.5)])[2] == 1


def test_a_run_looks_at_its_policy_file_at_a_prompts_start_once_a_quarter_second_passed(tmp_path):
    """A look is a stat: one per prompt of a fast prompt set at most every poll_s, never between rounds."""
    from types import SimpleNamespace

    from specmon.events.schema import PolicyLoaded

    path = tmp_path / "p.toml"
    path.write_text(DEFAULT.read_text())
    emitted: list = []
    driver = SimpleNamespace(session_id="s", emit=emitted.append)
    engine = PolicyEngine(load_policy(path), "s", STEEP)
    scheduler = PolicyScheduler(driver, engine, None, on_reload=None, poll_s=0.25)
    loads = lambda: [e for e in emitted if isinstance(e, PolicyLoaded)]  # noqa: E731

    def edit(gain: str) -> None:
        path.write_text(DEFAULT.read_text().replace("min_gain = 0.02", f"min_gain = {gain}"))
        os.utime(path, ns=(time.time_ns(), time.time_ns() + int(gain[-1]) * 10**9))  # a new stamp, whatever the clock

    scheduler.look(driver, now=10.0)  # a prompt starts: looked
    edit("0.01")
    scheduler.look(driver, now=10.2)  # the next prompt, too soon
    assert len(loads()) == 1  # only the session's first
    scheduler.look(driver, now=10.25)
    assert len(loads()) == 2 and engine.policy.settings.min_gain == 0.01
    assert loads()[1].changed == ["policy"] and [c.name for c in loads()[1].classes] == [
        c.name for c in engine.policy.classes
    ]
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

    driver = SimpleNamespace(
        session_id="s",
        emit=emitted.append,
        decode_steps=decode_steps,
        finish=lambda *a: None,
        sample_resources=lambda: None,
    )
    engine = PolicyEngine(load_policy(path), "s", STEEP)
    server = PolicyScheduler(driver, engine, None, on_reload=None, poll_s=0.25)
    path.write_text(
        DEFAULT.read_text().replace("min_gain = 0.02", "min_gain = 0.01").replace('name = "rewrite"', 'name = "rw"')
    )
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    with pytest.raises(UnknownClass, match="'rewrite'"):
        server.decode(Prompt("r1", "hi", "default"), Sampling(), 4, named="rewrite")
    assert [e.accepted for e in emitted if isinstance(e, PolicyLoaded)] == [True, True]
    assert engine.policy.settings.min_gain == 0.01 and decoded == []
    server.decode(Prompt("r2", "hi", "default"), Sampling(), 4, named="rw")
    assert decoded == [("rw", "named by the request (classes[1].name)")]


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
    path.write_text(DEFAULT.read_text().replace("min_gain = 0.02", "min_gain = 0.01"))
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    engine = PolicyEngine(policy, "s", STEEP)  # the model has loaded meanwhile
    reloaded = engine.maybe_reload()
    assert reloaded is not None and reloaded.accepted and engine.policy.settings.min_gain == 0.01


SIZED = """[policy]
mode = "enforce"

[[classes]]
name = "non-english"
match.script = ["cyrillic"]
match.min_chars = 20

[[classes]]
name = "short"
match.max_chars = 5

[[classes]]
name = "rest"
default = true
"""


@pytest.mark.parametrize(
    "text, tag, name, rule",
    [
        ("Привет", None, "rest", "default"),  # Cyrillic, but under min_chars: narrowed out
        ("Привет, как дела у тебя сегодня?", None, "non-english", "match.script"),
        ("hi", None, "short", "match.max_chars"),  # alone, a length bound matches by length
        ("hello there, friend", None, "rest", "default"),
    ],
)
def test_length_bounds_narrow_a_classs_other_match_keys_and_alone_match_by_length(text, tag, name, rule):
    got, why = classify(parse_policy(SIZED, "t.toml"), text, tag)
    assert (got, why.split(" ")[0].split("].")[-1]) == (name, rule)


def test_policy_set_adds_the_tables_on_the_way_inside_the_class(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(SIZED.replace('name = "short"\nmatch.max_chars = 5\n', 'name = "short"  # keep me\n'))
    set_value(path, "classes.short.match.max_chars", "5")
    policy = load_policy(path)
    assert next(c for c in policy.classes if c.name == "short").match.max_chars == 5
    assert "# keep me" in path.read_text() and classify(policy, "hi")[0] == "short"
    set_value(path, "routing.window", "10")
    assert load_policy(path).routing.window == 10
    before = path.read_text()
    with pytest.raises(Exception, match="'classes.short.matc.max_chars' is not a key a policy has"):
        set_value(path, "classes.short.matc.max_chars", "5")
    assert path.read_text() == before


def test_a_retired_dotted_key_is_warned_on_its_own_line_and_a_misspelt_key_gets_a_suggestion():
    old = SIZED.replace('name = "rest"\n', 'name = "rest"\nngram.max_match = 3\n')
    (warning,) = parse_policy(old, "t.toml").warnings
    assert warning.startswith(f"t.toml:{old.splitlines().index('ngram.max_match = 3') + 1}:1: classes[2].ngram ")
    with pytest.raises(PolicyError, match="unknown field `draft_lenght`; did you mean `draft_len`"):
        parse_policy(SIZED.replace("default = true\n", "default = true\ndraft_lenght = 4\n"), "t.toml")


FIVE_PROBLEMS = """[policy]
mode = "enforc"
min_gain = "lots"

[[classes]]
name = "rewrite"
match.min_given = 1.4

[[classes]]
name = "bad name!"
match.regex = ["(?<=x)y"]

[[classes]]
name = "chat"
default = true
"""


def test_policy_check_reports_each_problem_of_a_file_located_in_file_order(tmp_path, capsys):
    from specmon.cli.main import main

    path = tmp_path / "bad.toml"
    path.write_text(FIVE_PROBLEMS)
    assert main(["policy", "check", str(path)]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("specmon: ")]
    assert [line.split(": ", 2)[1] for line in lines] == [f"{path}:{n}:1" for n in (2, 3, 7, 10, 11)]
    assert "policy.mode: Invalid enum value 'enforc'" in lines[0]
    assert "policy.min_gain: Expected `float`, got `str`" in lines[1]
    assert "match.min_given = 1.4 must be 0..1" in lines[2]
    assert "class name 'bad name!' must be" in lines[3]
    assert "bad regular expression '(?<=x)y'" in lines[4]


def test_a_refused_policy_names_its_first_problem_and_holds_each():
    with pytest.raises(PolicyError) as refused:
        parse_policy(FIVE_PROBLEMS, "p.toml")
    assert str(refused.value).startswith("p.toml:2:1: policy.mode: Invalid enum value 'enforc'")
    assert [(p.line, p.column) for p in refused.value.problems] == [(2, 1), (3, 1), (7, 1), (10, 1), (11, 1)]


def test_a_file_with_no_classes_names_its_located_problems_first():
    with pytest.raises(PolicyError) as refused:
        parse_policy('[policy]\nmode = "enforc"\n', "p.toml")
    assert [str(p) for p in refused.value.problems] == [
        "p.toml:2:1: policy.mode: Invalid enum value 'enforc' (one of: enforce, advise)",
        "p.toml:1:1: no [[classes]]: add at least a default class",
    ]
