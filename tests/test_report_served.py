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
    monkeypatch.setattr(report, "save_figure", lambda fig, path: figures.setdefault(path.name, fig))
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


def test_a_missing_draft_count_is_said_one_way_in_the_line_log_info_the_report_and_the_view(tmp_path):
    """metrics.unreported.missing_counts: not reported (n/r where narrow) on the speculating side, `-` on the
    plain side and for a reply that failed (the report once said `not reported` on the plain side too)."""
    import io

    from rich.console import Console

    from specmon.metrics.served_summary import markdown, served_summary
    from specmon.proxy.tables import request_line, tally_summary
    from events import tally_of
    from specmon.tui.served_panes import render_classes
    from specmon.tui.served_state import ServedState

    timed = {"session_id": "w", "prompt_class": "chat", "predicted_n": 40, "predicted_ms": 400.0}
    spec, plain, failed = (
        request_timed(**timed, t=T0 + 1, request_id="r0", upstream="spec"),
        request_timed(**timed, t=T0 + 2, request_id="r1", upstream="plain"),
        request_timed(**timed, t=T0 + 3, request_id="r2", upstream="spec", status=502),
    )
    events = [header("proxy"), spec, plain, failed]
    short, long = {"spec": "n/r", "plain": "-"}, {"spec": "not reported", "plain": "-"}

    lines = {ev.request_id: dict(f.split("=") for f in request_line(ev).split() if "=" in f) for ev in events[1:]}
    assert {rid: line["acc"] for rid, line in lines.items()} == {"r0": "n/r", "r1": "-", "r2": "-"}
    state = ServedState()
    state.apply(events)
    pane = [row.split() for row in render_classes(state, 36).plain.splitlines() if row.startswith("chat ")]
    assert {row[1]: row[3] for row in pane} == short
    console = Console(file=io.StringIO(), width=100, color_system=None)
    console.print(tally_summary(tally_of(events), None))
    table = {
        row.split()[1]: row.split()[5:7] for row in console.file.getvalue().splitlines() if row.startswith("chat ")
    }
    assert table["spec"] == long["spec"].split() and table["plain"][0] == long["plain"]  # acceptance, after accepted
    page = markdown(served_summary(write_log(tmp_path / "proxy.specmon", events)))
    cells = [[c.strip() for c in row.split("|")[1:-1]] for row in page if row.startswith("| chat |")]
    assert {row[1]: row[5] for row in cells} == long


def test_the_reports_tok_s_is_on_the_clock_log_info_judges_the_class_on(tmp_path):
    """A class whose plain side gives no decode time is judged on the proxy's clock, both sides: the report's
    rows say the same figures, marked *, as log info's table (the report once chose a clock row by row)."""
    import io

    from rich.console import Console

    from specmon.metrics.served_summary import markdown, served_summary
    from specmon.proxy.tables import tally_summary
    from events import tally_of

    def reply(i: int, side: str, decode_ms: float | None):
        return request_timed(session_id="w", t=T0 + i, request_id=f"r{i}", prompt_class="chat", upstream=side,
                             predicted_n=40, predicted_ms=decode_ms, total_ms=500.0 + 10 * i)  # fmt: skip

    events = [header("proxy"), *(reply(i, "spec" if i % 2 else "plain", 400.0 if i % 2 else None) for i in range(6))]
    console = Console(file=io.StringIO(), width=100, color_system=None)
    console.print(tally_summary(tally_of(events), None))
    table = {row.split()[1]: row.split()[-1] for row in console.file.getvalue().splitlines() if row.startswith("chat ")}
    page = markdown(served_summary(write_log(tmp_path / "proxy.specmon", events)))
    cells = {
        c[1]: c[-1] for c in ([x.strip() for x in row.split("|")[1:-1]] for row in page if row.startswith("| chat |"))
    }
    assert table == cells and all(speed.endswith("*") for speed in cells.values()) and len(cells) == 2, (table, cells)
