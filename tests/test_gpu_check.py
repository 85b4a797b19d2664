"""scripts/gpu_check.py keeps working through the refactors: it imports, parses its arguments, and
its session and table code runs on the CPU (the tiny model stands in for the GPU pair)."""

import importlib.util
import json
from pathlib import Path

import pytest

from specmon.backends.profiles import load_profile
from specmon.engine.prompts import builtin_suite
from specmon.events.schema import PromptFinished, RoundVerified
from tinymodel import tiny_profile

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_arguments_parse(gpu_check):
    args = gpu_check.build_parser().parse_args(
        ["--prompts", "3", "--max-new-tokens", "12", "-k", "5", "--build-seconds", "exl2 140s", "--engines", "exl3"]
    )
    assert (args.prompts, args.max_new_tokens, args.k, args.build_seconds) == (3, 12, 5, "exl2 140s")
    assert args.engines == "exl3"
    assert gpu_check.build_parser().parse_args([]).k == 4


def test_each_engine_gets_a_model_and_an_ngram_configuration_beside_torch(gpu_check, tmp_path):
    target, draft = tmp_path / "target", tmp_path / "draft"
    profiles = gpu_check.configurations(tmp_path, target, draft, ["exl2", "exl3"])
    assert list(profiles) == ["exl2 model", "exl2 ngram", "exl3 model", "exl3 ngram", "torch model"]
    backends = {name: p.backend for name, p in profiles.items()}
    assert backends == {
        "exl2 model": "exllamav2",
        "exl2 ngram": "exllamav2",
        "exl3 model": "exllamav3",
        "exl3 ngram": "exllamav3",
        "torch model": "torch",
    }
    for name, profile in profiles.items():
        assert profile.device == "cuda" and profile.target.path == str(target)
        assert profile.drafter.kind == name.split()[1]
        assert profile.drafter.kind == "ngram" or profile.drafter.target.path == str(draft)
    assert list(gpu_check.configurations(tmp_path, target, draft, ["exl3"])) == [
        "exl3 model",
        "exl3 ngram",
        "torch model",
    ]


def test_the_table_is_markdown_with_a_row_per_configuration(gpu_check):
    rows = {
        "exl3 model": {"plain tok/s": 250.0, "speedup": 1.234},
        "torch model": {"plain tok/s": None, "speedup": 0.9},
    }
    lines = gpu_check.markdown(rows, ["plain tok/s", "speedup"])
    assert lines[0] == "| config | plain tok/s | speedup |" and lines[1] == "|---|---|---|"
    assert lines[2:] == ["| exl3 model | 250.0 | 1.234 |", "| torch model | - | 0.900 |"]


def test_the_short_bench_policy_runs_on_a_profile(gpu_check, tmp_path, monkeypatch):
    """The command line it builds is one specmon takes (here on the tiny CPU model)."""
    monkeypatch.setenv("SPECMON_STATE", str(tmp_path / "state"))
    said = gpu_check.bench_policy(load_profile(str(tiny_profile(tmp_path))), tmp_path / "b.json")
    assert not said.startswith("exit"), said
    figures = json.loads((tmp_path / "b.json").read_text())
    assert figures and said.rstrip().endswith(" s)")


def test_one_configuration_runs_and_folds_on_the_cpu(gpu_check, tmp_path):
    profile = load_profile(str(tiny_profile(tmp_path)))
    prompts = builtin_suite(["rewrite"])[:2]
    events = gpu_check.run_config(profile, prompts, 3, 10)
    rounds = [e for e in events if isinstance(e, RoundVerified)]
    finished = [e for e in events if isinstance(e, PromptFinished)]
    assert sorted((e.prompt_id, e.draft_len) for e in finished) == sorted((p.id, k) for p in prompts for k in (0, 3))
    row = gpu_check.fold(events, 3)
    spec = [e for e in rounds if e.draft_len == 3]
    assert row["acceptance"] == pytest.approx(sum(e.accepted for e in spec) / sum(len(e.proposed) for e in spec))
    assert row["speedup"] == pytest.approx(row["spec tok/s"] / row["plain tok/s"])
    assert set(row["spec vs plain"]) <= {"identical", "near-tie"}  # fp32 greedy: speculation gives plain's tokens
    assert gpu_check.agreement(gpu_check.outputs(events), gpu_check.outputs(events)) == "2/2 prompts identical"
