"""scripts/bench_llama_server.py: skips with its reason where no llama-server is built, and where one
is (scripts/setup-llama-server), compares specmon's policy with llama-server's n-gram modes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "bench_llama_server.py"
sys.path.insert(0, str(ROOT / "scripts"))
import bench_llama_server  # noqa: E402


def test_without_a_llama_server_it_says_why_and_skips(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench_llama_server, "ROOT", tmp_path)  # no .venv/bin/llama-server here
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("LLAMA_SERVER", raising=False)
    monkeypatch.setattr(sys, "argv", ["bench_llama_server.py"])
    assert bench_llama_server.main() == 0
    assert capsys.readouterr().out.startswith("skipped: no llama-server found (bash scripts/setup-llama-server")
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    assert bench_llama_server.find_server() == binary  # on PATH
    monkeypatch.setattr(sys, "argv", ["bench_llama_server.py", "--server", str(tmp_path / "absent")])
    with pytest.raises(SystemExit, match="--server .*absent: no such executable"):
        bench_llama_server.main()


@pytest.mark.slow
def test_against_a_built_llama_server_every_mode_is_measured_against_its_own_plain(tmp_path):
    binary = ROOT / ".venv/bin/llama-server"
    if not binary.exists():
        pytest.skip("no llama-server built here (bash scripts/setup-llama-server)")
    pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed (bash scripts/setup-llamacpp)")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        "".join(
            json.dumps({"id": f"p{i}", "prompt": text}) + "\n"
            for i, text in enumerate(
                [
                    "Repeat exactly: the cat sat on the mat. the cat sat on the mat.",
                    "Fix the typo: teh quick brown fox jumps over the lazy dog.",
                ]
            )
        )
    )
    out = tmp_path / "out.json"
    subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--prompts",
            str(prompts),
            "--max-new-tokens",
            "16",
            "--log",
            str(tmp_path / "s.specmon"),
            "--json",
            str(out),
        ],
        check=True,
        cwd=ROOT,
        capture_output=True,
        timeout=600,
    )
    rows = json.loads(out.read_text())
    (name,) = set(rows) - {"all"}  # both prompts fall in one class, whichever the policy says
    row = rows[name]
    assert rows["all"] == row  # one class: the all-classes row is that class
    assert row["specmon_plain"] > 0 and row["server_plain"] > 0
    assert set(row["server_over_plain"]) == {"ngram-simple", "ngram-map-k", "ngram-mod"}
    assert all(0.2 < ratio < 5 for ratio in [row["auto_over_plain"], *row["server_over_plain"].values()])
