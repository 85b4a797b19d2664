"""`specmon policy tune`: a bench log's greedy texts replayed through the session driver and the
policy scheduler, on a replay target, with modelled round costs."""

import json
from pathlib import Path

import pytest

from specmon.backends.profiles import load_profile, resolve_model_path
from specmon.backends.tokenizer import load_tokenizer
from specmon.engine.draft_len import FixedDraftLen
from specmon.engine.drafters import NgramDrafter
from specmon.engine.driver import SessionDriver
from specmon.engine.prompts import builtin_suite
from specmon.events.log import read_log
from specmon.events.schema import PromptFinished, PromptStarted, RoundVerified, Sampling, bench_fixed_k
from specmon.replay.tune import STEP_MS, ModelledRounds, ReplayTarget, cost_of, read_bench_log
from specmoncli import specmon
from test_tools_bench import assert_one_line_error
from tinymodel import tiny_profile

REPO = Path(__file__).resolve().parent.parent
COSTS = "1.2,1.3,1.5,1.5"


@pytest.fixture(scope="module")
def bench_log(tmp_path_factory):
    """A tiny model's `bench policy` log (greedy, k = 0 and 4), and its profile."""
    tmp = tmp_path_factory.mktemp("tune")
    profile = tiny_profile(tmp)
    log = tmp / "bench.specmon"
    done = specmon(
        "bench",
        "policy",
        "--profile",
        str(profile),
        "--classes",
        "rewrite,chat",
        "--ks",
        "0,4",
        "--max-new-tokens",
        "16",
        "--repeat",
        "1",
        "--log",
        str(log),
    )
    assert done.returncode == 0, done.stderr
    return log, profile


def test_tune_prints_each_class_against_plain_and_the_best_k(bench_log, tmp_path):
    log, profile = bench_log
    out = tmp_path / "tune.json"
    done = specmon(
        "policy",
        "tune",
        str(log),
        "--profile",
        str(profile),
        "--ks",
        "0,2,4",
        "--costs",
        COSTS,
        "--repeat",
        "2",
        "--json",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert set(result["classes"]) == {"rewrite", "chat"}
    for c in result["classes"].values():
        assert c["over_plain"]["0"] == 1.0  # plain over itself, exactly
        assert set(c["over_plain"]) == {"0", "2", "4"} and all(r > 0 for r in c["over_plain"].values())
        assert c["auto_over_best"] <= 1.0 + 0.02  # choosing k round by round may edge past one fixed k, not by much
        assert c["best_k"] in (0, 2, 4)
    overall = result["overall"]  # the best single k over every class, plain included (as `bench policy` has it)
    assert overall["best_k"] in (0, 2, 4) and overall["auto_over_best"] <= 1.0 + 0.02
    assert result["costs"] == {"1": 1.2, "2": 1.3, "3": 1.5, "4": 1.5}
    assert result["prompts"] == 8 and result["repeat"] == 2
    assert "auto against the best single k" in done.stdout


def test_replayed_decodes_give_the_logged_plain_text_at_any_k_with_modelled_times(bench_log):
    """The replay target makes greedy acceptance exact, and every round's time is the model's
    before an observer (the policy) sees it."""
    log, profile = bench_log
    bench = read_bench_log(log)
    loaded = load_profile(str(profile))
    tokenizer = load_tokenizer(resolve_model_path(loaded.target, loaded))
    cost = cost_of({1: 1.2, 2: 1.3, 4: 1.5})
    target = ReplayTarget(tokenizer.vocab_size, tokenizer.eos_id)
    modelled = ModelledRounds(cost)
    driver = SessionDriver("t", target, tokenizer, modelled, 0.0)
    seen = []
    prompts = [p for p in builtin_suite(["rewrite", "chat"]) if p.id in bench.texts]
    assert len(prompts) == 8
    for prompt in prompts:
        text = bench.texts[prompt.id]
        target.sequence = tokenizer.encode_chat(prompt.text) + text
        for k in (0, 3, 8):
            done = driver.decode(
                prompt,
                NgramDrafter(),
                FixedDraftLen(k),
                Sampling(),
                len(text),
                on_round=lambda ev: seen.append((ev.verify_ms, ev.draft_ms, ev.overhead_ms, len(ev.proposed))),
            )
            assert done.run.generated == text
    assert seen and all((v, d, o) == (STEP_MS * cost(n), 0.0, 0.0) for v, d, o, n in seen)
    assert any(n for *_, n in seen)  # some rounds drafted, so acceptance was tested


def test_bench_log_plain_texts_are_the_bench_k0_decodes(bench_log):
    log, _ = bench_log
    bench = read_bench_log(log)
    opened, plain = None, {}
    for ev in read_log(log):
        if isinstance(ev, PromptStarted):
            opened = ev
        elif isinstance(ev, PromptFinished) and bench_fixed_k(opened) == 0:
            plain[ev.prompt_id] = ev.generated
    assert bench.texts == plain and len(plain) == 8
    assert any(isinstance(ev, RoundVerified) and ev.proposed for ev in read_log(log))


def test_tune_mistakes_are_one_line(bench_log, tmp_path):
    log, profile = bench_log
    assert_one_line_error(specmon("policy", "tune", str(tmp_path / "nope.specmon")), "nope.specmon", "cannot open")
    assert_one_line_error(specmon("policy", "tune", str(log), "--profile", str(profile), "--ks", "0,x"), "--ks")
    assert_one_line_error(specmon("policy", "tune", str(log), "--profile", str(profile), "--costs", "1,-2"), "--costs")
    run_log = REPO / "tests" / "fixtures" / "session-v1.specmon"
    assert_one_line_error(specmon("policy", "tune", str(run_log)), "not a `specmon bench policy` log")
    assert_one_line_error(
        specmon("policy", "tune", str(log), "--costs", COSTS), "is not what the log ran"
    )  # its tokenizer
    other = tmp_path / "p.jsonl"
    other.write_text('{"id": "x1", "prompt": "hi", "class": "chat"}\n')
    assert_one_line_error(
        specmon("policy", "tune", str(log), "--profile", str(profile), "--prompts", str(other), "--costs", COSTS),
        "no prompt of the set has a plain run",
    )


def test_tune_help_says_what_it_replays():
    done = specmon("policy", "tune", "--help")
    assert done.returncode == 0
    for phrase in ("without timing noise", "goodput over plain", "example:", "--costs", "--json"):
        assert phrase in done.stdout
