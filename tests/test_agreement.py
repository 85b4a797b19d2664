"""One log, three readers: the TUI's class table, `specmon log info` and report.json show the same
figures for every class, field by field (each formatted as its reader prints it)."""

from __future__ import annotations

import json

import pytest

from specmon.cli.main import main
from specmon.replay.report import build_report
from test_tui_view import FIXTURES, TUI_EVENTS, drawn, prefilled

LOG = FIXTURES / "session-tui.specmon"
MARKS = {"faster": "", "slower": "", "not yet known": "?", "noise": "!"}


def log_info_rows(capsys) -> dict[tuple[str, str], list[str]]:
    """`log info`'s two stacked tables, joined per (class, k): acceptance cells, then speed cells."""
    assert main(["log", "info", str(LOG)]) == 0
    rows: dict[tuple[str, str], list[str]] = {}
    for line in capsys.readouterr().out.splitlines():
        cells = line.split()
        if len(cells) >= 8 and cells[1].isdigit():
            key = (cells[0], cells[1])
            rows[key] = rows[key] + cells[2:] if key in rows else cells[1:]
    return rows


def report_rows(tmp_path) -> dict[str, dict]:
    build_report(LOG, tmp_path / "report")
    return json.loads((tmp_path / "report" / "report.json").read_text())["summary"]["classes"]


async def tui_rows() -> dict[str, list[str]]:
    app = prefilled(TUI_EVENTS)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, TUI_EVENTS)
        table = app.screen.query_one("#classes")
        return {
            str(table.get_row_at(i)[0]): [str(c).strip() for c in table.get_row_at(i)] for i in range(table.row_count)
        }


async def test_tui_class_table_log_info_and_report_json_agree(tmp_path, capsys):
    report, every_k, shown = report_rows(tmp_path), log_info_rows(capsys), await tui_rows()
    assert set(report) == set(shown) == {"rewrite", "chat"}
    assert set(every_k) == {(name, k) for name, r in report.items() for k in r["by_draft_len"]}
    printed = {name: every_k[(name, str(r["draft_len"]))] for name, r in report.items()}  # at the TUI's k
    for name, r in report.items():
        speedup = f"{r['speedup']:.2f}×" + MARKS[r["speedup_verdict"]]
        rate = "N/A" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.2f}"
        # log info: k prompts rounds empty proposed accepted rate mean | draft verify tok/s plain speedup CI output
        k, prompts, rounds, empty, proposed, accepted, p_rate, mean = printed[name][:8]
        assert [k, rounds, empty, proposed, accepted, p_rate, mean] == [
            str(r["draft_len"]),
            str(r["rounds"]),
            str(r["empty_rounds"]),
            str(r["proposed"]),
            str(r["accepted"]),
            rate,
            f"{r['mean_accepted_len']:.2f}",
        ], name
        assert prompts == str(r["prompts"])
        assert printed[name][8:13] == [
            f"{r['draft_ms']:.2f}",
            f"{r['verify_ms']:.1f}",
            f"{r['tok_per_s']:.1f}",
            f"{r['baseline_tok_per_s']:.1f}",
            speedup,
        ], name
        ci = "-" if r["speedup_low"] is None else f"{r['speedup_low']:.2f}–{r['speedup_high']:.2f}"
        assert printed[name][13] == ci
        # the TUI: class k rounds empty acc len speedup on/off
        assert shown[name][1:7] == [
            str(r["draft_len"]),
            str(r["rounds"]),
            str(r["empty_rounds"]),
            rate,
            f"{r['mean_accepted_len']:.2f}",
            speedup,
        ], name
    assert report["rewrite"]["speedup"] == pytest.approx(
        report["rewrite"]["tok_per_s"] / report["rewrite"]["baseline_tok_per_s"]
    )
