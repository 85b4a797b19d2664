"""The report's speedup columns say what a missing figure is missing, not "not yet known" about
a log that will never hold more rounds."""

from pathlib import Path

from specmon.replay.report import build_report

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _rows(page: Path) -> dict[tuple[str, str], list[str]]:
    """The summary table's rows by (class, k), each as its cells."""
    rows = {}
    for line in page.read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        if line.startswith("| ") and len(cells) == 9 and cells[1].isdigit():
            rows[(cells[0], cells[1])] = cells
    return rows


def test_a_class_the_log_never_ran_plain_has_no_speedup_and_says_so(tmp_path):
    """Served under a policy, code-edit and chat ran at k only: there is nothing to measure a
    speedup against (once `N/A | - (not yet known)`, which no later round could make known)."""
    rows = _rows(build_report(FIXTURES / "session-serve.specmon", tmp_path))
    assert rows[("code-edit", "7")][6:] == ["N/A", "-", "- (no plain rounds of this class in the log)"]
    assert rows[("chat", "2")][6:] == ["N/A", "-", "- (no plain rounds of this class in the log)"]
    assert "not yet known" not in (tmp_path / "report.md").read_text()


def test_a_speedup_without_an_interval_says_how_many_prompts_it_had(tmp_path):
    """One prompt on a side leaves no spread to draw an interval from: the row says so."""
    serve = _rows(build_report(FIXTURES / "session-serve.specmon", tmp_path / "serve"))
    assert serve[("rewrite", "7")][7:] == ["2.13×", "- (1 prompt at k=7, 1 plain: an interval needs 2 a side)"]
    policy = _rows(build_report(FIXTURES / "session-policy.specmon", tmp_path / "policy"))
    assert policy[("non-english", "4")][7:] == ["1.23×", "- (1 prompt at k=4, 2 plain: an interval needs 2 a side)"]
    # an interval across 1 keeps its verdict: more prompts may tell
    assert policy[("chat", "2")][7:] == ["0.80×", "0.59–1.13 (not yet known)"]
