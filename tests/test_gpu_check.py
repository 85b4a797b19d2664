"""scripts/gpu_check.py keeps working through the refactors: it imports, parses its arguments, and
its session and table code runs on the CPU (the tiny model stands in for the GPU pair)."""

import importlib.util
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
        ["--prompts", "3", "--max-new-tokens", "12", "-k", "5", "--build-seconds", "140"]
    )
    assert (args.prompts, args.max_new_tokens, args.k, args.build_seconds) == (3, 12, 5, 140)
    assert gpu_check.build_parser().parse_args([]).k == 4


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
