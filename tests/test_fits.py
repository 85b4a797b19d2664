"""What must hold of every line a command prints at the width the terminal asks (COLUMNS), checked at 60,
80, 100 and 160 columns instead of pinned wrapped strings:
- no line is wider than the width (in the columns a terminal shows);
- nothing goes unsaid: each figure (a number) the command prints at an unbounded width is printed at a
  narrow one too, unless a cut there says so with `…`;
- no label is parted from its value: no line ends in a `label:` whose value starts the next line.
Over `log info` of each kind of log (a run, a policy session, a server's, a proxy's), `policy explain`,
`replay --headless`, `policy check` and every command's `--help`; and every pane's renderer of the live
and the served view at every width a pane gets."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from rich.cells import cell_len

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
WIDTHS = (60, 80, 100, 160)
UNBOUNDED = 1000  # wide enough that nothing is wrapped or cut: the reference rendering
FIGURE = re.compile(r"(?<![\w./-])\d+(?:\.\d+)?(?![\w./-])")  # 12, 0.71, 1.005: not part of a name or path
LABEL_AT_END = re.compile(r"\b[a-z][a-z /-]*:$")  # a line that ends in `acceptance:` and so on


def problems(lines: list[str], reference: list[str], width: int) -> list[str]:
    """What breaks the properties above in `lines` (printed at `width`) against `reference` (printed unbounded)."""
    found = [f"{cell_len(line)} > {width}: {line}" for line in lines if cell_len(line) > width]
    said, cut = Counter(FIGURE.findall("\n".join(lines))), any("…" in line for line in lines)
    unsaid = Counter(FIGURE.findall("\n".join(reference))) - said
    if unsaid and not cut:
        found.append(f"figures printed unbounded but not at {width}, with no … to say so: {sorted(unsaid)[:10]}")
    for line, after in zip(lines, lines[1:]):
        if LABEL_AT_END.search(line.rstrip()) and FIGURE.match(after.strip()):
            found.append(f"a label parted from its value: {line!r} / {after!r}")
    return found


def printed(args: tuple[str, ...], width: int, cwd: Path) -> list[str]:
    env = {**os.environ, "COLUMNS": str(width)}
    done = subprocess.run(
        [sys.executable, "-m", "specmon.cli", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return (done.stdout + done.stderr).splitlines()


COMMANDS = {
    "log info (a run)": ("log", "info", str(FIXTURES / "session-tui.specmon")),
    "log info (a policy session)": ("log", "info", str(FIXTURES / "session-policy.specmon")),
    "log info (a server's)": ("log", "info", str(FIXTURES / "session-serve.specmon")),
    "replay --headless": ("replay", "--headless", str(FIXTURES / "session-serve.specmon")),
    "policy check": ("policy", "check", str(REPO / "policies" / "default.toml")),
}  # not `policy show`: it prints the file's own lines, to copy (test_widths holds the shipped ones to 80)


@pytest.mark.parametrize("name", COMMANDS)
def test_a_commands_lines_fit_every_width_and_leave_nothing_unsaid(name, tmp_path):
    reference = printed(COMMANDS[name], UNBOUNDED, tmp_path)
    assert FIGURE.search("\n".join(reference)), reference  # it printed figures to check
    broken = {width: problems(printed(COMMANDS[name], width, tmp_path), reference, width) for width in WIDTHS}
    assert {width: found for width, found in broken.items() if found} == {}


def test_policy_explain_fits_every_width_and_leaves_nothing_unsaid(live_session, tmp_path):
    args = ("policy", "explain", str(live_session.log_path))  # a log of today's rule: explain reproduces it
    reference = printed(args, UNBOUNDED, tmp_path)
    broken = {width: problems(printed(args, width, tmp_path), reference, width) for width in WIDTHS}
    assert {width: found for width, found in broken.items() if found} == {}


def test_a_proxy_logs_info_fits_every_width_and_leaves_nothing_unsaid(tmp_path):
    from events import request_timed, session_started
    from specmon.events.log import LogWriter

    log = tmp_path / "proxy.specmon"
    with LogWriter(log) as writer:
        writer.write(session_started(session_id="p"))
        for i in range(24):  # two classes on two sides, one that gave no decode time
            side = "spec" if i % 2 else "plain"
            name = "chat" if i % 3 else "a-rather-long-class-name"
            decode_ms = None if (side == "plain" and name == "chat") else 900.0 + 37 * i
            writer.write(request_timed(request_id=f"r{i}", prompt_class=name, upstream=side, predicted_ms=decode_ms))
    args = ("log", "info", str(log))
    reference = printed(args, UNBOUNDED, tmp_path)
    broken = {width: problems(printed(args, width, tmp_path), reference, width) for width in WIDTHS}
    assert {width: found for width, found in broken.items() if found} == {}


def test_every_commands_help_fits_every_width_and_leaves_nothing_unsaid(monkeypatch):
    from specmon.cli.main import build_parser
    from test_widths import every_command

    def helps(width: int) -> dict[str, list[str]]:
        monkeypatch.setenv("COLUMNS", str(width))  # argparse reads it as it formats
        return {
            " ".join(words) or "specmon": cmd.format_help().splitlines() for words, cmd in every_command(build_parser())
        }

    reference = helps(UNBOUNDED)
    assert len(reference) > 20
    for width in WIDTHS:
        broken = {
            name: found for name, lines in helps(width).items() if (found := problems(lines, reference[name], width))
        }
        assert broken == {}, width


def test_the_checks_catch_a_line_one_column_too_wide_a_silent_cut_and_a_parted_label():
    reference = ["acceptance: 0.71 over 12 rounds", "tok/s 18.4"]
    fits = ["acceptance: 0.71 over", "12 rounds", "tok/s 18.4"]
    assert problems(fits, reference, 21) == []
    assert problems(fits, reference, 20) == ["21 > 20: acceptance: 0.71 over"]  # one column too wide
    silent = ["acceptance: 0.71 over", "tok/s 18.4"]  # "12 rounds" dropped with no …
    assert problems(silent, reference, 21) == ["figures printed unbounded but not at 21, with no … to say so: ['12']"]
    assert problems(["acceptance: 0.71 ov…", "tok/s 18.4"], reference, 21) == []  # a cut that says so
    parted = ["acceptance:", "0.71 over 12 rounds", "tok/s 18.4"]
    assert problems(parted, reference, 21) == ["a label parted from its value: 'acceptance:' / '0.71 over 12 rounds'"]


# -- every pane's renderer, at every width a pane may get ------------------------------------------
# a pane's content is half the terminal less its border and padding: 26 columns at 60, 36 at 80, 76 at 160
PANE_WIDTHS = range(26, 79)


def _lines_past(text, width: int) -> list[str]:
    plain = text if isinstance(text, str) else text.plain
    return [f"{cell_len(line)} > {width}: {line}" for line in plain.splitlines() if cell_len(line) > width]


def _past_every_width(renderers: dict, widths: dict[str, range] | range = PANE_WIDTHS) -> dict:
    """(renderer, width) -> its lines past the width, for each renderer (width -> text) at each of its
    `widths` (one range for all, or one per renderer, PANE_WIDTHS where none is named)."""
    return {
        (name, w): lines
        for name, render in renderers.items()
        for w in (widths if isinstance(widths, range) else widths.get(name, PANE_WIDTHS))
        if (lines := _lines_past(render(w), w))
    }


def test_every_pane_of_the_live_view_fits_every_width(monkeypatch):
    from specmon.events.log import read_log
    from specmon.tui import panes, rows
    from specmon.tui.state import ACCEPTANCE_METRICS, ViewState

    for fixture in ("session-tui.specmon", "session-policy.specmon"):
        state = ViewState()
        state.apply(list(read_log(FIXTURES / fixture)))
        renderers = {
            "rejections": lambda w: panes.render_rejections(state, w),
            "timing": lambda w: panes.render_timing(state, w),
            "speed": lambda w: panes.render_speed(state, w),
            "round set": lambda w: panes.round_set(state, w),
            "rejections caption": lambda w: panes.rejections_caption(state, w),
            "policy figure": lambda w: rows.policy_figure(state, w),
            **{f"acceptance {m}": (lambda w, m=m: panes.render_acceptance(state, m, w)) for m in ACCEPTANCE_METRICS},
            **{f"caption {m}": (lambda w, m=m: panes.sparkline_caption(state, m, w)) for m in ACCEPTANCE_METRICS},
        }
        assert _past_every_width(renderers) == {}, fixture


def test_every_pane_of_the_served_view_fits_every_width():
    from specmon.events.log import read_log
    from specmon.tui import served_panes as sp
    from specmon.tui.served_state import ServedState
    from test_proxy_clock import traffic

    for name, events in (
        ("a server's log", list(read_log(FIXTURES / "session-serve.specmon"))),
        ("proxied traffic", list(traffic(400))),
    ):
        state = ServedState()
        state.apply(events)
        renderers = {
            "acceptance": lambda w: sp.render_acceptance(state, w),
            "positions": lambda w: sp.render_positions(state, w),
            "rates": lambda w: sp.render_rates(state, w),
            "server": lambda w: sp.render_server(state, w),
            "totals": lambda w: sp.render_totals(state, w),
            "classes": lambda w: sp.render_classes(state, w),
            "title": lambda w: sp.title(state, "proxy.specmon", ["VIEW PAUSED"], w),
        }
        assert _past_every_width(renderers) == {}, name
