"""The n-gram drafter's confidence as the policy learns it (classes[i].ngram.max_match): min_match
rises by one while the rounds whose match was exactly min_match tokens surely lose to plain steps, on
this machine's costs, and every such decision is recomputed exactly from the rounds it cites."""

import msgspec
import re

import pytest

from specmon.errors import SpecmonError
from specmon.events.schema import Decision, RoundVerified, Sampling
from specmon.policy.decide import Row
from specmon.policy.match import decide_match, stale
from specmon.policy.engine import PolicyEngine
from specmon.policy.explain import explain
from specmon.policy.schema import parse_policy
from specmon.engine.prompts import Prompt
from specmon.sched import bench
from specmon.sched.policy import PolicyScheduler
from specmon.tui.state import ViewState
from test_policy import DEFAULT

TH = {"min_gain": 0.03, "hysteresis": 0.05, "min_rounds": 16.0, "plain_rounds": 8.0, "k_gain": 0.08,
      "adapt": 1.0, "k_min": 2.0, "k_max": 8.0, "interval": 1.0, "silent_plain": 1.0, "match": 2.0,
      "max_match": 4.0}
PLAIN_MS = 100.0


def rows(k, proposed, emitted, ms, prompts=4, per_prompt=4, start=0):
    """per_prompt rounds in each of `prompts` prompts, every one alike but for a little spread."""
    out, rid = [], start
    for p in range(prompts):
        for _ in range(per_prompt):
            out.append(Row(rid, k, emitted, ms * (1 + 0.02 * p), f"p{p}", proposed, rid))
            rid += 1
    return out


def test_min_match_rises_when_the_drafts_of_exactly_min_match_tokens_surely_lose():
    plain = rows(0, 0, 1, PLAIN_MS, per_prompt=2)
    # 2-token drafts that emit 1.5 tokens a round at 2.1 plain steps: 0.71x plain's goodput
    losing = rows(8, 2, 1.5, 2.1 * PLAIN_MS, start=100)
    longer = rows(8, 6, 7, 1.8 * PLAIN_MS, start=200)  # longer matches pay, and are not judged
    out = decide_match(True, 8, plain + losing + longer, TH)
    assert (out.rule, out.match, out.speculate, out.k) == ("ngram.max_match", 3, True, 8)
    off = decide_match(False, 8, plain + losing + longer, TH)  # an off class's watched prompts draft too
    assert (off.match, off.speculate, off.k) == (3, False, 8)
    assert out.inputs["ratio"] == pytest.approx(1.5 / 2.1, rel=0.05) and out.inputs["high"] < 1.0
    assert out.round_ids == sorted(r.round_id for r in plain + losing)  # it cites the rounds it judged
    # the same drafts emitting 2.5 tokens pay (1.19x): min_match stays
    assert decide_match(True, 8, plain + rows(8, 2, 2.5, 2.1 * PLAIN_MS, start=100), TH) is None
    # at k=2 a 2-token draft with no match length recorded (an older log) may have been cut by k: not judged
    assert decide_match(True, 2, plain + rows(2, 2, 1.5, 2.1 * PLAIN_MS, start=100), TH) is None
    # too few such rounds: no decision yet
    assert decide_match(True, 8, plain + losing[:15], TH) is None


def test_a_ratio_below_one_whose_interval_reaches_one_changes_nothing():
    plain = rows(0, 0, 1, PLAIN_MS, per_prompt=2)
    # two prompts lose badly, two pay: 0.98x over all, but the interval over prompts spans 1
    mixed = rows(8, 2, 1, 2.1 * PLAIN_MS, prompts=2, start=100) + [
        Row(r.round_id, 8, 3, 2.1 * PLAIN_MS, f"q{r.round_id % 2}", 2, r.round_id)
        for r in rows(8, 2, 3, 1.0, prompts=2, start=200)]
    assert decide_match(True, 8, plain + mixed, TH) is None


def test_a_recorded_match_length_picks_the_rounds_however_far_they_drafted():
    """Where a padded verify pass lets a 2-token match draft on to k, its rounds propose 8 tokens:
    the match length each round records, not the draft's, says which rounds a raise silences."""
    plain = rows(0, 0, 1, PLAIN_MS, per_prompt=2)
    extended = [r._replace(matched=2) for r in rows(8, 8, 1.5, 2.1 * PLAIN_MS, start=100)]
    longer = [r._replace(matched=5) for r in rows(8, 8, 7, 1.8 * PLAIN_MS, start=200)]
    out = decide_match(True, 8, plain + extended + longer, TH)
    assert out.match == 3 and out.round_ids == sorted(r.round_id for r in plain + extended)
    # a 3-token match that the context's end cut to 2 tokens is not a 2-token match
    cut = [r._replace(matched=3) for r in rows(8, 2, 1.5, 2.1 * PLAIN_MS, start=100)]
    assert decide_match(True, 8, plain + cut + longer, TH) is None
    assert (stale(extended[0], 3), stale(cut[0], 3), stale(longer[0], 3)) == (True, False, False)
    # a 2-token match at k=2 counts when its length is recorded; unrecorded (an older log), k may have cut it
    at_k = rows(2, 2, 1.5, 2.1 * PLAIN_MS, start=100)
    recorded = [r._replace(matched=2) for r in at_k]
    assert decide_match(True, 2, plain + recorded, TH).match == 3 and decide_match(True, 2, plain + at_k, TH) is None


class Stream:
    """Rounds fed straight into a PolicyEngine, as the live round loop feeds them: each round's k
    from the engine, its proposal as long as `proposal(k)` says, timed by the cost model."""

    def __init__(self, engine: PolicyEngine, name: str):
        self.engine, self.name, self.round_id, self.events = engine, name, 0, []

    def prompt(self, prompt_id: str, rounds: int, emitted_when_drafting: int, drafted_ms: float,
               match: int = 2, extend: bool = False) -> None:
        schedule = self.engine.start_prompt(self.name, prompt_id)
        min_match = self.engine.confidence(self.name)[0]
        for index in range(rounds):
            k = self.engine.round_k(self.name, schedule)
            # every 2nd round finds a match of exactly `match` tokens; the drafter proposes it only
            # if the match is at least min_match long
            proposed = [7] * (k if extend else match) if k > match and index % 2 and match >= min_match else []
            emitted = emitted_when_drafting if proposed else 1
            ev = RoundVerified(
                session_id="s", t=0.0, round_id=self.round_id, prompt_id=prompt_id, prompt_class=self.name,
                round_index=index, draft_len=k, proposed=proposed, accepted=emitted - 1,
                rejection_pos=None if emitted - 1 == len(proposed) else emitted - 1, emitted=[5] * emitted,
                draft_ms=0.0, verify_ms=drafted_ms if proposed else PLAIN_MS, overhead_ms=0.0,
                target_probs=[], alpha_hat=None, margins=[], sampling=Sampling(), mem_bytes=0,
                matched=match if proposed and extend else 0)  # extend: a padded pass's drafts record their match
            self.round_id += 1
            self.events.append(ev)
            decision = self.engine.after_round(ev, schedule)
            if decision is not None:
                self.events.append(decision)
                min_match = self.engine.confidence(self.name)[0]  # as the live session: from the next round

    def decisions(self) -> list[Decision]:
        return [e for e in self.events if isinstance(e, Decision)]


def explained(stream: Stream) -> list:
    cited = {ev.round_id: Row.of(ev) for ev in stream.events if isinstance(ev, RoundVerified)}
    return [explain(d, cited) for d in stream.decisions()]


def test_the_engine_raises_min_match_on_a_machine_where_short_drafts_lose_and_explain_recomputes_it():
    engine = PolicyEngine(parse_policy(DEFAULT.read_text(), "default.toml"), "s")
    stream = Stream(engine, "code-edit")
    assert engine.confidence("code-edit") == (2, 1)  # the file's min_match to start with
    for p in range(12):  # half the rounds draft 2 tokens and keep 1 of them, at 2.1 plain steps
        stream.prompt(f"p{p}", 24, emitted_when_drafting=2, drafted_ms=2.1 * PLAIN_MS)
    raised = [d for d in stream.decisions() if d.match_to]
    assert [(d.match_from, d.match_to, d.rule_key) for d in raised][:1] == [(2, 3, "classes[0].ngram.max_match")]
    assert all((d.speculate_from, d.k_from) == (d.speculate_to, d.k_to) for d in raised)  # only the drafter changes
    assert engine.confidence("code-edit") == (3, 1)
    # the 2-token drafts it no longer makes leave the evidence: the switch judges the drafter as it is
    assert not [r for w in engine.state("code-edit").windows.values() for r in w if r.proposed == 2]
    assert all(e.reproduces for e in explained(stream))
    # a raised min_match leaves 2-token matches silent: nothing more to judge, so it stays at 3
    for p in range(12, 20):
        stream.prompt(f"p{p}", 24, emitted_when_drafting=2, drafted_ms=2.1 * PLAIN_MS)
    assert engine.confidence("code-edit") == (3, 1) and len([d for d in stream.decisions() if d.match_to]) == 1


def test_drafts_extended_past_their_match_still_raise_min_match_where_they_lose():
    engine = PolicyEngine(parse_policy(DEFAULT.read_text(), "default.toml"), "s")
    stream = Stream(engine, "code-edit")
    for p in range(12):  # 2-token matches drafting on to k=8, keeping 1 token, at 2.1 plain steps
        stream.prompt(f"p{p}", 24, emitted_when_drafting=2, drafted_ms=2.1 * PLAIN_MS, extend=True)
    raised = [d for d in stream.decisions() if d.match_to]
    assert [(d.match_from, d.match_to) for d in raised][:1] == [(2, 3)] and engine.confidence("code-edit") == (3, 1)
    assert not [r for w in engine.state("code-edit").windows.values() for r in w if r.matched == 2]
    assert all(e.reproduces for e in explained(stream))


def test_the_engine_keeps_min_match_where_short_drafts_pay():
    engine = PolicyEngine(parse_policy(DEFAULT.read_text(), "default.toml"), "s")
    stream = Stream(engine, "code-edit")
    for p in range(20):  # the same drafts on a machine where their verify costs 1.2 plain steps
        stream.prompt(f"p{p}", 24, emitted_when_drafting=2, drafted_ms=1.2 * PLAIN_MS)
    assert engine.confidence("code-edit") == (2, 1)
    assert not [d for d in stream.decisions() if d.match_to]


def test_min_match_never_passes_max_match_nor_drops_below_the_files_own():
    text = DEFAULT.read_text().replace("min_match = 2, min_seen = 1, max_match = 4", "min_match = 2, min_seen = 1")
    engine = PolicyEngine(parse_policy(text, "default.toml"), "s")
    engine.state("chat").min_match = 4
    assert engine.confidence("chat") == (2, 1)  # no max_match: the file's min_match, whatever was learned
    engine = PolicyEngine(parse_policy(DEFAULT.read_text(), "default.toml"), "s")
    engine.state("chat").min_match = 9
    assert engine.confidence("chat") == (4, 1)


def test_a_max_match_below_min_match_is_one_clear_error():
    text = DEFAULT.read_text().replace("min_match = 2, min_seen = 1, max_match = 4",
                                       "min_match = 3, min_seen = 1, max_match = 2", 1)
    with pytest.raises(SpecmonError, match=re.escape("ngram.max_match = 2 must be 0 (min_match stays fixed) or min_match (3)..16")):
        parse_policy(text, "p.toml")


class Confident:
    def __init__(self):
        self.calls = []

    def confident(self, min_match=0, min_seen=1):
        self.calls.append((min_match, min_seen))


def test_the_policys_decode_uses_the_learned_min_match_and_a_fixed_k_run_the_files():
    engine = PolicyEngine(parse_policy(DEFAULT.read_text(), "default.toml"), "s")
    engine.state("rewrite").min_match = 3
    scheduler = PolicyScheduler.__new__(PolicyScheduler)  # only its drafter set-up is under test here
    scheduler.engine, drafter = engine, Confident()
    scheduler.configure_drafter("rewrite", drafter)
    scheduler.configure_drafter("rewrite", drafter, learned=False)
    assert drafter.calls == [(3, 1), (2, 1)]


def test_a_decision_logged_before_min_match_was_learned_still_decodes():
    new = Decision(session_id="s", t=0.0, decision_id=0, prompt_class="chat", speculate_from=True,
                   speculate_to=False, k_from=8, k_to=8, rule_key="policy.min_gain", rule_line=1, inputs={},
                   thresholds={}, round_ids=[1], applied=True, policy_sha256="x", reason="")
    old = msgspec.msgpack.encode(new)
    fields = msgspec.msgpack.decode(old)
    fields = fields[:-2]  # an old writer knew no match_from / match_to
    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(fields), type=Decision)
    assert (decoded.match_from, decoded.match_to, decoded.reason) == (0, 0, "")


def test_in_advise_mode_a_raise_is_advised_once_and_the_other_rules_still_advise():
    text = DEFAULT.read_text().replace('mode = "enforce"', 'mode = "advise"')
    engine = PolicyEngine(parse_policy(text, "default.toml"), "s")
    stream = Stream(engine, "code-edit")
    for p in range(20):
        stream.prompt(f"p{p}", 24, emitted_when_drafting=2, drafted_ms=2.1 * PLAIN_MS)
    decisions = stream.decisions()
    raised = [d for d in decisions if d.match_to]
    assert [(d.match_from, d.match_to, d.applied) for d in raised] == [(2, 3, False)]
    assert any(not d.match_to and not d.speculate_to for d in decisions[decisions.index(raised[0]):])  # off advised
    assert engine.confidence("code-edit") == (2, 1)


def test_a_reload_starts_min_match_from_the_file_again_for_a_class_it_changed(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(DEFAULT.read_text())
    engine = PolicyEngine(parse_policy(path.read_text(), str(path)), "s")
    engine.state("chat").min_match = engine.state("rewrite").min_match = 3
    path.write_text(DEFAULT.read_text() + "\n# edited\n")  # no class changed: what each learned holds
    engine._mtime = None  # the edit is seen whatever the file system's clock says
    assert engine.maybe_reload().changed == [] and engine.confidence("chat") == (3, 1)
    edited = DEFAULT.read_text().replace("ngram = { min_match = 2, min_seen = 1, max_match = 4 }\ndraft_len = { min = 2, "
                                         "max = 8, start = 8, adapt = \"goodput\" }  # as the others",
                                         "ngram = { min_match = 2, min_seen = 1, max_match = 3 }\ndraft_len = { min = 2, "
                                         "max = 8, start = 8, adapt = \"goodput\" }  # as the others")
    assert edited != DEFAULT.read_text()
    path.write_text(edited)
    engine._mtime = None
    loaded = engine.maybe_reload()
    assert loaded.changed == ["chat"] and engine.confidence("chat") == (2, 1) and engine.confidence("rewrite") == (3, 1)
    assert [(c.name, c.min_match) for c in loaded.classes if c.name in ("chat", "rewrite")] == [("rewrite", 3), ("chat", 2)]


def test_a_bench_fixed_k_run_drafts_with_the_files_min_match():
    engine = PolicyEngine(parse_policy(DEFAULT.read_text(), "default.toml"), "s")
    engine.state("rewrite").min_match = 3
    scheduler = PolicyScheduler.__new__(PolicyScheduler)
    scheduler.engine, drafter = engine, Confident()

    class Driver:
        def decode_steps(self, *args, **kwargs):
            yield from ()
            return "decoded"

        def finish(self, done, checked):
            self.finished = done

    driver = Driver()
    steps = bench._fixed(scheduler, driver, drafter, Prompt("p", "text", "default"), "rewrite", 4, Sampling(), 8)
    assert list(steps) == [] and driver.finished == "decoded" and drafter.calls == [(2, 1)]


def test_the_live_view_shows_a_min_match_decision_without_switching_the_class():
    engine = PolicyEngine(parse_policy(DEFAULT.read_text(), "default.toml"), "s")
    stream = Stream(engine, "code-edit")
    for p in range(12):
        stream.prompt(f"p{p}", 24, emitted_when_drafting=2, drafted_ms=2.1 * PLAIN_MS)
    raised = next(d for d in stream.decisions() if d.match_to)
    state = ViewState()
    state.apply([raised])
    assert state.decisions == [raised] and "code-edit" not in state.off_by and "code-edit" not in state.decided
