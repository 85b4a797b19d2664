"""Every line the commands print fits 80 columns when COLUMNS=80 asks for them, piped as a
script or `tee` reads them: `log info` on every fixture, `policy explain`, `attach --headless`
(its round and decision lines too), `replay --headless`, `report`, `policy check`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.cells import cell_len

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
LOGS = sorted(FIXTURES.glob("*.specmon"))
WIDTH = 80


def at_80(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": str(WIDTH)}
    return subprocess.run(
        [sys.executable, "-m", "specmon.cli", *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=120
    )


def wide_lines(done: subprocess.CompletedProcess) -> list[str]:
    lines = (done.stdout + done.stderr).splitlines()
    assert lines, "the command printed nothing"
    return [f"{cell_len(line)}: {line}" for line in lines if cell_len(line) > WIDTH]  # columns a terminal shows


@pytest.mark.parametrize("log", LOGS, ids=[p.name for p in LOGS])
def test_log_info_fits_80_columns(log):
    assert wide_lines(at_80("log", "info", str(log))) == []


def test_log_infos_legend_wraps_at_words():
    done = at_80("log", "info", str(FIXTURES / "session-policy.specmon"))
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("prompts: decoded at that k"))
    legend = lines[start:]
    words = " ".join(line.strip() for line in legend).split()
    assert "speedup" in words and "per-position" in words and "acceptance" in words  # no word split over lines
    assert all(cell_len(line) <= WIDTH for line in legend) and len(legend) > 1


def test_policy_explain_fits_80_columns(live_session):
    done = at_80("policy", "explain", str(live_session.log_path))
    assert done.returncode == 0 and " reproduce from what they cite" in done.stdout, done.stdout + done.stderr
    assert wide_lines(done) == []


def test_attach_headless_round_lines_fit_80_columns_whole():
    """A round is one line (91 columns once); a wrapped one would be two lines to a reader."""
    done = at_80("attach", "--headless", str(FIXTURES / "session-policy.specmon"))
    assert done.returncode == 0, done.stderr
    assert wide_lines(done) == []
    rounds = [line for line in done.stdout.splitlines() if line.startswith("  round ")]
    assert len(rounds) == 523 and all(line.endswith(" ms") for line in rounds)


def test_replay_headless_report_and_policy_check_fit_80_columns(tmp_path):
    assert wide_lines(at_80("replay", "--headless", str(FIXTURES / "session-serve.specmon"))) == []
    assert wide_lines(at_80("report", str(FIXTURES / "session-tui.specmon"), "--out", str(tmp_path / "r"))) == []
    assert wide_lines(at_80("policy", "check", str(REPO / "policies" / "default.toml"))) == []
