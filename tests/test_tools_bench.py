"""`specmon bench verify|engines|serve`, run as a user runs them, on
the tiny model: what their --json says, what their --help teaches, and their one-line mistakes."""

import importlib.util
import json

import pytest

from specmoncli import specmon
from tinymodel import tiny_profile

HAS_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None


def assert_one_line_error(done, *fragments):
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("specmon: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    return str(tiny_profile(tmp_path_factory.mktemp("tools")))


def test_bench_verify_costs_every_position_against_one(profile, tmp_path):
    out = tmp_path / "verify.json"
    done = specmon(
        "bench",
        "verify",
        "--profile",
        profile,
        "--context",
        "40",
        "--reps",
        "2",
        "--max-positions",
        "5",
        "--json",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert set(result["layouts"]) == {"plain", "packed"}  # a torch profile: both weight layouts, interleaved
    for layout in result["layouts"].values():
        assert list(layout["cost"]) == ["1", "2", "3", "4", "5"]
        assert layout["cost"]["1"] == 1.0
        assert all(c > 0 for c in layout["cost"].values()) and all(ms > 0 for ms in layout["ms"].values())
    assert "v(k)" in done.stdout


def test_bench_engines_compares_each_engine_with_its_own_plain(profile, tmp_path):
    out = tmp_path / "engines.json"
    done = specmon(
        "bench",
        "engines",
        "--engines",
        "torch-fp32,llamacpp",
        "--profile",
        profile,
        "--classes",
        "rewrite,chat",
        "--tokens",
        "8",
        "--json",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    engines = result["engines"]
    assert list(engines) == (["torch-fp32", "llamacpp"] if HAS_LLAMA_CPP else ["torch-fp32"])
    torch = engines["torch-fp32"]
    assert torch["vs_first"] == 1.0 and torch["identical"] == torch["compared"] == 8  # fp32 greedy: token-identical
    for name, e in engines.items():
        assert e["prompts"] == e["compared"] == 8 and 0 <= e["identical"] <= 8, (name, e)
        assert e["plain_tok_s"] > 0 and e["vs_first"] == pytest.approx(e["plain_tok_s"] / torch["plain_tok_s"])
        assert e["interval"] is not None and e["interval"][0] <= e["interval"][1], (name, e)
        assert e["verdict"] == verdict_of(e["interval"]), (name, e)  # the interval decides, nothing else
        assert f"{e['ngram_speedup']:.2f}x ({e['verdict']})" in done.stdout, name
    assert set(result["classes"]) == {"rewrite", "chat"}
    assert all(set(by_engine) == set(engines) for by_engine in result["classes"].values())
    if HAS_LLAMA_CPP:
        assert result["skipped"] == {}
    else:  # optional: one clear line, and the others still run
        assert list(result["skipped"]) == ["llamacpp"]
        skipped = [line for line in done.stderr.splitlines() if line.startswith("llamacpp: skipped")]
        assert len(skipped) == 1 and "llama-cpp-python is not installed" in skipped[0]


def verdict_of(interval: list[float]) -> str:
    """What a 95% interval of a speedup says (no sanity bound or busy host in `bench engines`)."""
    low, high = interval
    return "faster" if low > 1.0 else "slower" if high < 1.0 else "not yet known"


def test_bench_serve_measures_served_against_direct(profile, tmp_path):
    pytest.importorskip("openai")
    out = tmp_path / "serve.json"
    done = specmon(
        "bench",
        "serve",
        "--profile",
        profile,
        "--count",
        "2",
        "--max-tokens",
        "6",
        "--repeat",
        "1",
        "--clients",
        "2",
        "--json",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [(r["path"], r["clients"], r["requests"]) for r in rows] == [
        ("direct (driver)", 1, 2),
        ("served, streamed", 1, 2),
        ("served, streamed", 2, 2),
    ]
    assert rows[0]["vs_direct"] == 1.0 and all(r["tok_s"] > 0 for r in rows)
    assert rows[1]["ttft_p50_ms"] > 0


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["bench", "engines", "--engines", "torch-fp32,vllm"], ["--engines", "torch-fp32"]),
        (["bench", "serve", "-k", "99"], ["-k must be 0..64"]),
        (["bench", "verify", "--profile", "no-such-profile"], ["no-such-profile"]),
    ],
)
def test_bench_tool_mistakes_are_one_line(args, fragments):
    assert_one_line_error(specmon(*args), *fragments)


@pytest.mark.parametrize(
    "command, phrases",
    [
        ("verify", ["verify pass", "plain step", "example:", "--json"]),
        ("engines", ["plain tok/s", "n-gram speedup", "95% interval", "example:", "--json"]),
        ("serve", ["tokens/s", "direct", "time to first token", "example:", "--json"]),
    ],
)
def test_bench_tool_help_says_what_it_measures(command, phrases):
    done = specmon("bench", command, "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())  # argparse wraps the description
    for phrase in phrases:
        assert phrase.lower() in text.lower(), phrase


def test_inputs_a_bench_would_refuse_late_are_refused_before_any_model_loads(tmp_path):
    """Each is one line, at once: a --reference that is not a program, a --log that exists."""
    done = specmon("bench", "engines", "--reference", str(tmp_path / "no-such-binary"), "--tokens", "4")
    assert_one_line_error(done, "--reference", "no such program")
    existing = tmp_path / "old.specmon"
    existing.write_bytes(b"")
    done = specmon("bench", "serve", "--log", str(existing), "--count", "1")
    if "openai" not in done.stderr:  # without the openai client bench serve stops at that first
        assert_one_line_error(done, str(existing), "exists")
    assert "loading" not in done.stderr


def test_run_takes_a_shipped_prompt_set_by_name_and_refuses_a_policy_without_a_drafter(tmp_path):
    done = specmon("run", "--headless", "--policy", "default", "--drafter", "none", "--prompts", "bench")
    assert_one_line_error(done, "--policy needs a drafter")
    done = specmon(
        "run", "--headless", "--prompts", "bench", "--classes", "no-such-class", "--log", str(tmp_path / "x.specmon")
    )
    assert "cannot read" not in done.stderr and "no-such-class" in done.stderr  # the set was read by its name
