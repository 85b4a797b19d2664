"""Memory across sessions (memory.store): a second session starts from what the first learned, cites
it, and explain reproduces its decisions; a store of another key, --fresh, or a damaged file is never
read (the last a warning line); stored evidence weighs less with age and gives way to fresh rounds."""

import time
from pathlib import Path

import msgspec
import pytest

from specmon.events.log import LogWriter
from specmon.events.schema import Decision
from specmon.memory.store import HALF_LIFE_S, Entry, Memory, Shelf, accept_key, age_weight
from specmon.policy import gate
from specmon.policy.engine import Learned
from specmon.policy.explain import explain_log
from specmon.policy.schema import parse_policy
import test_policy
from test_policy import ONE_CLASS, STEEP

session = test_policy.session  # the fixture: a scripted policy session per call

KEY = {"backend": "scripted", "target": "t", "drafter": "scripted"}
POLICY = ONE_CLASS.format(mode="enforce", speculate="auto")


def shelf(key=KEY, **options) -> tuple[Shelf, list[str]]:
    warnings: list[str] = []
    return Shelf(Memory(warn=warnings.append, **options), "accept", key), warnings


def write_log(path, events):
    with LogWriter(path) as writer:
        for ev in events:
            writer.write(ev)
    return path


def first_session(session):
    """A session on the steep engine whose every draft token is rejected: it learns that 2-token
    matches do not pay (the prior verified one token there) and keeps it."""
    kept, _ = shelf()
    live = session(parse_policy(POLICY), STEEP, shelf=kept, session_id="first")
    verified, decisions = live.prompt("chat", rounds=30, emitted=1)
    assert verified[0] == 1 and verified[-1] == 0 and decisions  # as in test_policy: learned on its own rounds
    live.engine.remember(final=True)
    return live


def test_a_second_session_starts_from_the_first_ones_evidence_cites_it_and_explain_reproduces_it(session, tmp_path):
    first = first_session(session)
    learned = first.engine.learned()["chat"]
    # 4 drafted rounds, then 26 whose drafts the table cut whole, each settled by the token emitted instead (a Shadow)
    assert learned.session_id == "first" and learned.rounds == 30 and learned.tried[2] == 30 and learned.taken[2] == 0
    again, warnings = shelf()
    second = session(parse_policy(POLICY), STEEP, shelf=again, session_id="second")
    (opening,) = second.engine.opening  # decided before its first round
    recall = opening.gate.recalled
    assert recall.session_id == "first" and recall.rounds == 30 and opening.round_ids == []
    assert recall.tried[2] == recall.pool_tried[2] == 30 and recall.taken[2] == 0  # all 30, under STORED_CAP
    assert (opening.match_from, opening.match_to) == (2, 3)  # a 2-token match no longer drafts, from the start
    verified, decisions = second.prompt("chat", rounds=10, emitted=1)
    assert verified == [0] * 10 and not warnings  # nothing spent learning it again
    events = second.events
    assert [e for e in events if isinstance(e, Decision)][0] is opening  # the scheduler published it first
    explained = explain_log(write_log(tmp_path / "second.specmon", events))
    assert explained and all(e.reproduces for e in explained), [e.detail for e in explained]
    assert "session first" in explained[0].detail


def test_another_key_fresh_and_a_damaged_store_start_cold_the_last_with_one_warning(session):
    first_session(session)
    for other, options in [({**KEY, "drafter": "model:other"}, {}), (KEY, {"fresh": True})]:
        cold, warnings = shelf(other, **options)
        live = session(parse_policy(POLICY), STEEP, shelf=cold, session_id="cold")
        assert live.engine.opening == [] and not warnings
        assert (
            live.prompt("chat", rounds=5, emitted=1)[0][: gate.CHECK_EVERY] == [1] * gate.CHECK_EVERY
        )  # the prior's table
    path = Memory().path("accept", KEY)
    path.write_bytes(path.read_bytes()[:-20])  # a write cut short (by hand: the store writes atomically)
    damaged, warnings = shelf()
    live = session(parse_policy(POLICY), STEEP, shelf=damaged, session_id="after")
    assert live.engine.opening == [] and len(warnings) == 1 and str(path) in warnings[0]
    live.prompt("chat", rounds=30, emitted=1)
    live.engine.remember(final=True)  # the damaged file is replaced by what this session learned
    assert shelf()[0].recall(dict[str, Learned]).body["chat"].session_id == "after"


def test_a_store_holding_another_key_or_version_is_a_warning_not_a_store():
    keep, _ = shelf()
    keep.keep("s", {"chat": 1})
    other = {**KEY, "target": "another"}
    theirs = Memory().path("accept", other)
    theirs.write_bytes(Memory().path("accept", KEY).read_bytes())  # copied under another key's name
    read, warnings = shelf(other)
    assert read.recall(dict[str, int]) is None and len(warnings) == 1
    assert shelf()[0].recall(dict[str, int]).body == {"chat": 1}


def test_a_class_whose_match_rules_changed_does_not_read_what_it_learned_before(session):
    first_session(session)
    edited = POLICY + 'match = { keywords = ["hello"] }\n'
    again, _ = shelf()
    live = session(parse_policy(edited), STEEP, shelf=again, session_id="edited")
    assert live.engine.opening == []


@pytest.mark.parametrize("age_weeks", [0, 1, 3])
@pytest.mark.parametrize("fresh_positions", [0, 10, 40])
def test_stored_evidence_weighs_less_with_age_and_gives_way_to_fresh_positions(age_weeks, fresh_positions):
    weight = age_weight(time.time() - age_weeks * HALF_LIFE_S / 1.0 * 1.0)
    assert weight == pytest.approx(0.5**age_weeks, rel=1e-3)
    own = gate.Counts()
    own.tried[3] = fresh_positions
    stored_tried, stored_taken = [100.0] * gate.BUCKETS, [75.0] * gate.BUCKETS
    tried, taken = gate.top_up(stored_tried, stored_taken, own, weight)
    room = max(0.0, gate.STORED_CAP * weight - fresh_positions)
    assert tried[3] == pytest.approx(room) and tried[0] == pytest.approx(gate.STORED_CAP * weight)
    assert all(t == pytest.approx(0.75 * n) for t, n in zip(taken, tried))  # the stored acceptance, scaled


def test_keys_differ_by_sampling_and_the_costs_key_by_host():
    from specmon.events.schema import Sampling
    from specmon.memory.store import costs_key

    greedy, hot = accept_key(KEY, Sampling()), accept_key(KEY, Sampling(temperature=0.8))
    assert greedy != hot and greedy["backend"] == "scripted"
    here, there = costs_key(KEY, {"hostname": "a", "cpus": "2"}), costs_key(KEY, {"hostname": "b", "cpus": "2"})
    assert here != there and costs_key(KEY, {"hostname": "a", "cpus": "2", "cpu_stall": "psi"}) == here


def test_the_engines_costs_are_timed_once_per_host_and_engine_and_again_on_retime(tiny, tmp_path, monkeypatch):
    from specmon.backends.identity import engine_key
    from specmon.policy.schema import load_policy
    from specmon.transport import session as session_module
    from specmon.transport.session import live_session

    profile, pair = tiny
    timed = []
    real = session_module.measure_costs
    monkeypatch.setattr(session_module, "measure_costs", lambda *a, **k: timed.append(1) or real(*a, **k))

    def costs(name, **options):
        memory = Memory(**options)
        key = engine_key(profile, pair.drafter.name)
        with live_session(
            pair,
            profile,
            tmp_path / f"{name}.specmon",
            serve=False,
            announce=False,
            policy=load_policy("default"),
            memory=memory,
            engine_key=key,
        ) as live:
            return live.costs

    first = costs("first")
    assert len(timed) == 1 and first.verify_ms[0] > 0
    if first.disturbed:
        pytest.skip("the host disturbed the timing: such a curve is not kept")
    assert costs("second") == first and len(timed) == 1  # read from the store: not timed again
    assert costs("third", retime=True) is not first and len(timed) == 2
    bf16 = msgspec.structs.replace(profile, dtype="bfloat16")  # another engine setting: another key
    assert engine_key(bf16, pair.drafter.name) != engine_key(profile, pair.drafter.name)


def test_bench_policy_a_second_time_reads_the_costs_and_classes_the_first_kept_and_fresh_reads_nothing(tmp_path):
    """The command itself, three times on the tiny model: the store the first run left is read by the
    second (its costs not timed again, its decisions citing the first session and reproduced by
    explain), and --fresh reads none of it."""
    import os
    import subprocess
    import sys

    from specmon.events.log import read_log
    from tinymodel import tiny_profile

    profile = tiny_profile(tmp_path)

    def bench(name: str, *more: str) -> tuple[subprocess.CompletedProcess, list]:
        log = tmp_path / f"{name}.specmon"
        argv = ["bench", "policy", "--profile", str(profile), "--classes", "rewrite,chat", "--repeat", "1"]
        argv += ["--ks", "0,2", "--max-new-tokens", "12", "--log", str(log), *more]
        done = subprocess.run(
            [sys.executable, "-m", "specmon.cli", *argv], capture_output=True, text=True, cwd=tmp_path, timeout=300
        )
        assert done.returncode == 0, done.stderr
        return done, list(read_log(log))

    first, first_events = bench("first")
    first_id = first_events[0].session_id
    store = Path(os.environ["SPECMON_STATE"]) / "memory"
    (accept,) = store.glob("accept-*.json")
    entry = msgspec.json.decode(accept.read_bytes(), type=Entry[dict[str, Learned]])
    learned = entry.body
    assert entry.session_id == first_id and learned and all(c.session_id == first_id for c in learned.values())
    assert all(c.rounds > 0 and sum(c.tried) > 0 for c in learned.values())
    # Whether a tiny run's own evidence moves a table depends on the host's timing; every draft of the
    # first session's rejected, 32 times a reach, moves every class's from the prior's before its first round.
    rejected = {
        n: msgspec.structs.replace(c, tried=[32.0] * gate.BUCKETS, taken=[0.0] * gate.BUCKETS)
        for n, c in learned.items()
    }
    entry.body = msgspec.Raw(msgspec.json.encode(rejected))
    accept.write_bytes(msgspec.json.encode(entry))
    timed_quietly = bool(list(store.glob("costs-*.json")))  # a curve the host disturbed is not kept
    second, events = bench("second")
    assert ("timing the engine" not in second.stderr) == timed_quietly, second.stderr
    assert (f"costs as session {first_id}" in " ".join(second.stderr.split())) == timed_quietly
    cited = [d.gate.recalled for d in events if isinstance(d, Decision) and d.gate.recalled is not None]
    assert cited and all(r.session_id in (first_id, "") for r in cited)  # "": a class the first run did not store
    assert {d.prompt_class for d in events if isinstance(d, Decision) and not d.round_ids} >= set(learned)
    assert any(r.session_id == first_id and r.rounds > 0 for r in cited)
    explained = explain_log(tmp_path / "second.specmon")
    assert explained and all(e.reproduces for e in explained), [e.detail for e in explained]
    _, cold = bench("third", "--fresh")
    assert all(d.gate.recalled is None for d in cold if isinstance(d, Decision))
