"""`specmon report` on a server's log (watch, proxy: no rounds of its own) and on a log whose
rounds never drafted: no header-only rounds table, no blank plot."""

from pathlib import Path

from specmon.events.schema import SessionFinished
from specmon.replay import report
from specmon.replay.report import ROUND_PLOTS
from events import request_timed, round_verified
from test_watch_tui import T0, header, read, write_log


def _proxy_log(path: Path) -> Path:
    """A proxy's traffic: two reads of the server's counters and two requests it timed."""
    timed = {"session_id": "w", "upstream": "spec", "predicted_n": 40, "predicted_ms": 400.0}
    requests = [
        request_timed(**timed, t=T0 + 1, request_id="r0", prompt_class="code", draft_n=32, draft_n_accepted=24),
        request_timed(**timed, t=T0 + 2, request_id="r1", prompt_class="chat", draft_n=0, draft_n_accepted=0),
    ]
    finished = SessionFinished(session_id="w", t=T0 + 3, rounds=0, reason="done")
    return write_log(path, [header("proxy"), read(0, 0, 0, 0, [], 0), read(2, 6, 32, 24, [], 24), *requests, finished])


def test_a_servers_report_says_it_has_no_rounds_instead_of_an_empty_table_and_blank_plots(tmp_path):
    """The trial's proxy report had a header-only rounds table and a blank acceptance_by_position.png."""
    page = report.build_report(_proxy_log(tmp_path / "proxy.specmon"), tmp_path / "report").read_text()
    assert "| class | k | rounds |" not in page
    assert (
        "A server's log has no rounds: specmon decoded nothing, it read the server. "
        "The served traffic section below holds its figures."
    ) in page.splitlines()
    assert "## Served traffic" in page and "| code | spec | 1 | 32 | 24 | 0.75 |" in page
    assert [name for name in ROUND_PLOTS if f"]({name})" in page or (tmp_path / "report" / name).exists()] == []


def test_the_reports_requests_column_says_how_many_reported_as_log_info_does(tmp_path):
    """The trial's report said `| rewrite | spec | 4 | 86 |` where log info said `4 (2 reported)`."""
    timed = {"session_id": "w", "upstream": "spec", "prompt_class": "rewrite", "predicted_n": 40, "predicted_ms": 400.0}
    counted = {"draft_n": 43, "draft_n_accepted": 25}
    requests = [
        request_timed(**timed, **(counted if i < 2 else {}), t=T0 + 1 + i, request_id=f"r{i}") for i in range(4)
    ]
    log = write_log(tmp_path / "proxy.specmon", [header("proxy"), read(0, 0, 0, 0, [], 0), *requests])
    page = report.build_report(log, tmp_path / "report").read_text()
    assert "| rewrite | spec | 4 (2 reported) | 86 | 50 | 0.58 |" in page


def test_a_log_whose_rounds_never_drafted_says_so_in_its_position_plot(tmp_path, monkeypatch):
    """Plain rounds only: the acceptance-by-position frame says why it is empty, as over-time does."""
    rounds = [round_verified(round_id=i, round_index=i, t=T0 + i) for i in range(4)]
    log = write_log(tmp_path / "plain.specmon", [header("torch"), *rounds])
    figures = {}
    monkeypatch.setattr(report, "_save", lambda fig, path: figures.setdefault(path.name, fig))
    page = report.build_report(log, tmp_path / "report").read_text()
    (positions,) = figures["acceptance_by_position.png"].axes
    assert [t.get_text() for t in positions.texts] == [
        "no round proposed a draft token;\nno position to measure acceptance at"
    ]
    assert "| chat | 0 | 4 |" in page


def test_report_says_what_lies_beside_a_servers_page(tmp_path, capsys):
    """No plots beside a server's report: the command says report.json alone."""
    from specmon.cli.main import main

    out = tmp_path / "report"
    out.mkdir()
    (out / "timing.png").write_bytes(b"an earlier report's plot")  # a reused folder: no stale plot stays
    assert main(["report", str(_proxy_log(tmp_path / "proxy.specmon")), "--out", str(out)]) == 0
    assert not (out / "timing.png").exists()
    assert capsys.readouterr().out.strip() == f"report: {out / 'report.md'} (report.json beside it)"
