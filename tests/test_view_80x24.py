"""What a new user's trial at 80×24 found in the live view (issue 51): a title cut once the host was busy,
a decision's detail no key closed, `off` for a class nothing switched off, a class off by its policy shown
as if it never ran, and a replay opened at the end showing a notice the live view had cleared.
Read off the screen as a user sees it: through a Pilot, or `specmon replay` in tmux."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from specmon.events.log import LogWriter, read_log
from specmon.events.schema import ClassInForce, Decision, PolicyLoaded, PromptFinished, PromptStarted, RoundVerified
from specmon.metrics.rates import round_ms
from specmon.metrics.stats import class_stats
from specmon.replay.player import ReplayFeed
from specmon.tui.factory import make_app
from specmon.tui.rows import status_line
from specmon.tui.screens import DecisionScreen, HelpScreen
from specmon.tui.state import ViewState
from events import policy_loaded
from test_tui_view import prefilled, region_lines, with_more_decisions
from waiting import drawn, screen_lines, shown_until, wait_for_screen

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
POLICY_EVENTS = list(read_log(FIXTURES / "session-policy.specmon"))
TUI_EVENTS = list(read_log(FIXTURES / "session-tui.specmon"))
BOX = "╭╮╰╯│─"


def write_log(path: Path, events) -> Path:
    with LogWriter(path) as writer:
        for event in events:
            writer.write(event)
    return path


def stalled(events, busy) -> list:
    """`events` with every round for which busy(index of the round) holds disturbed for its whole time."""
    out, index = [], 0
    for ev in events:
        if isinstance(ev, RoundVerified):
            ev = msgspec.structs.replace(ev, host_stall_ms=round_ms(ev) if busy(index) else 0.0)
            index += 1
        out.append(ev)
    return out


def tmux_replay(log: Path, shown, what: str, name: str) -> str:
    """`specmon replay LOG` in an 80×24 tmux pane, as a person runs it: the screen once shown(screen)."""
    session = f"specmon-{name}-{os.getpid()}"
    cmd = f"cd {REPO} && TERM=xterm-256color {sys.executable} -m specmon.cli replay {log}; sleep 60"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "80", "-y", "24", cmd], check=True)
    try:
        return wait_for_screen(session, shown, what, timeout=120, still=True)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


# -- 1. the title keeps the session's own fields once the host is busy -------------------------------


def test_a_busy_host_shrinks_to_a_marker_before_the_sessions_fields_are_cut():
    state = ViewState()
    state.apply(stalled(POLICY_EVENTS[:-1], lambda i: True))  # still running, every round disturbed
    wide = status_line(state, "fixture", []).plain
    assert wide == "host busy: 64/64 rounds · c10aa0 smollm2-cpu@vm · ngram policy · 523 rounds"
    title = status_line(state, "fixture", [], width=60).plain
    assert title == "busy · c10aa0 smollm2-cpu@vm · ngram policy · 523 rounds"
    state.apply(POLICY_EVENTS[-1:])  # it ended: its host was busy, as far as it knows (it said `busy`)
    title = status_line(state, "fixture", [], width=78).plain  # the title's width at 80 columns
    assert title.startswith("was busy · c10aa0 smollm2-cpu@vm · ngram policy · ended ") and "…" not in title
    assert title.endswith(" · 523 rounds") and len(title) <= 78


def test_a_long_replay_position_drops_the_busy_marker_before_the_round_count():
    state = ViewState()
    state.apply(stalled(POLICY_EVENTS, lambda i: i < 100))  # busy early on, calm since: "was busy"
    title = status_line(state, "fixture", [], lead="⏸ 10× ev 104567", width=78).plain  # the profile goes first
    assert title == "⏸ 10× ev 104567 · was busy · c10aa0 · ngram policy · ended · 523 rounds"
    title = status_line(state, "fixture", [], lead="⏸ 10× ev 104567", width=len(title) - 1).plain
    assert title == "⏸ 10× ev 104567 · c10aa0 · ngram policy · ended · 523 rounds"  # then the marker, not the count
    marked = "⏸ 10× ev 104567 · was busy · c10aa0 smollm2-cpu · ngram policy · ended · 523 rounds"
    assert status_line(state, "fixture", [], lead="⏸ 10× ev 104567", width=len(marked)).plain == marked


@pytest.mark.parametrize("name", ["chat", "rewrite"])
async def test_pane_titles_at_80x24_name_what_fits_and_cut_nothing(name):
    end = next(  # the end of the class's first prompt drafted at some k
        i
        for i, e in enumerate(POLICY_EVENTS)
        if isinstance(e, PromptFinished) and e.prompt_class == name and i and _drafted(POLICY_EVENTS[:i], e.prompt_id)
    )
    events = POLICY_EVENTS[: end + 1]
    app = prefilled(events)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, events)
        k = app.state.class_k
        tops = {pane: region_lines(app, pane)[0] for pane in ("acceptance", "speed", "rejections", "timing")}
        assert not any("…" in top for top in tops.values()), tops
        assert f"─ ms · k={k} ─" in tops["timing"] and f"rejections · {name} k={k}" in tops["rejections"], tops


def _drafted(events, prompt_id: str) -> bool:
    return any(isinstance(e, PromptStarted) and e.prompt_id == prompt_id and e.draft_len for e in events)


async def test_the_sparklines_foot_counts_the_marks_it_draws():
    events = POLICY_EVENTS[:137]  # to the end of chat's first prompts: 62 rounds, more than the sparkline is wide
    app = prefilled(events)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, events)
        lines = region_lines(app, "acceptance")
        marks = len(lines[-2][1:-1].strip())  # the sparkline: the pane's last content line
        assert marks == len(lines[-2]) - 4 and f"last {marks} rounds;" in lines[-1], lines  # a full line, all counted


@needs_tmux
def test_replay_at_80_columns_shows_the_busy_marker_and_every_field_of_the_session(tmp_path):
    log = write_log(tmp_path / "busy.specmon", stalled(POLICY_EVENTS, lambda i: True))
    screen = tmux_replay(log, lambda s: "523 rounds" in s or "…" in s.splitlines()[0], "the title drawn", "busy")
    title = screen.splitlines()[0].strip()
    assert title.startswith("⏸ max ev 568 · was busy · c10aa0 · ngram policy · ended · "), title  # it ended
    assert title.endswith(" · 523 rounds") and "…" not in title, title


# -- 2. a decision's detail closes from the keyboard, alone on a clean screen ------------------------


async def open_decision(app, pilot) -> None:
    table = app.screen.query_one("#decisions")
    table.focus()
    table.move_cursor(row=0)
    await pilot.press("enter")
    await shown_until(pilot, lambda: isinstance(app.screen, DecisionScreen), "the decision's detail open")


def overlay_is_clean(lines: list[str]) -> None:
    """Every line is blank or the box's own: no pane's border or text beside the box's edges."""
    boxed = [line for line in lines if line.strip()]
    assert boxed, "the overlay drew nothing"
    for line in boxed:
        assert line[0] in BOX and line.rstrip()[-1] in BOX, line
    assert not any(pair in line for line in lines for pair in ("╭╭", "╰│", "╮╮", "│╰", "││")), lines


@pytest.mark.parametrize("key", ["escape", "enter"])
async def test_escape_and_enter_close_a_decisions_detail(key):
    app = prefilled(POLICY_EVENTS)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, POLICY_EVENTS)
        first = next(e for e in POLICY_EVENTS if isinstance(e, Decision))
        await open_decision(app, pilot)
        screen = "\n".join(screen_lines(app))
        assert f"decision {first.decision_id} [{first.prompt_class}] off" in screen
        assert f"cited {len(first.round_ids)} rounds" in screen
        overlay_is_clean(screen_lines(app))
        await pilot.press(key)
        await shown_until(pilot, lambda: not isinstance(app.screen, DecisionScreen), f"{key} closed it")
        assert "cited" not in "\n".join(screen_lines(app)) and len(app.screen_stack) == 1


async def test_a_decisions_detail_wraps_each_line_under_its_value():
    from decisions import gate_decision

    from specmon.tui.rows import render_decision

    d = gate_decision("chat", 8, 2, decision_id=11)
    app = prefilled(POLICY_EVENTS)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, POLICY_EVENTS)
        app.push_screen(DecisionScreen(render_decision(d, []), d.decision_id))
        await shown_until(pilot, lambda: isinstance(app.screen, DecisionScreen), "the detail open")
        await pilot.pause()
        boxed = [line[2:-2].rstrip() for line in screen_lines(app) if line.startswith("│")]
        inputs = next(i for i, line in enumerate(boxed) if line.startswith("inputs: "))
        thresholds = next(i for i, line in enumerate(boxed) if line.startswith("thresholds: "))
        assert thresholds - inputs > 1 and boxed[inputs + 1].startswith(" " * 8 + "class's"), boxed  # under the value
        assert boxed[thresholds + 1].startswith(" " * 12) and boxed[thresholds + 1].strip()[0].isdigit(), boxed


async def test_help_and_a_decisions_detail_are_never_on_screen_together():
    app = prefilled(POLICY_EVENTS)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, POLICY_EVENTS)
        await open_decision(app, pilot)
        await pilot.press("question_mark")  # closes the detail; help comes on its own
        await shown_until(pilot, lambda: len(app.screen_stack) == 1, "the detail closed")
        await pilot.press("question_mark")
        await shown_until(pilot, lambda: isinstance(app.screen, HelpScreen), "help open")
        assert len(app.screen_stack) == 2 and "cited" not in "\n".join(screen_lines(app))
        overlay_is_clean(screen_lines(app))


async def test_the_help_overlay_has_no_pane_border_beside_its_edges_in_a_replay():
    app = make_app(ReplayFeed(FIXTURES / "session-policy.specmon", speed=0.0))
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot)
        await pilot.press("question_mark")
        await shown_until(pilot, lambda: isinstance(app.screen, HelpScreen), "help open")
        overlay_is_clean(screen_lines(app))


# -- 3. and 4. `off` is only a class the policy switched off; its plain rounds are shown -------------


def class_line(app, name: str) -> list[str]:
    """The classes pane's row of `name` as on screen, split into its cells."""
    line = next(line for line in region_lines(app, "classes") if line.strip("│ ").startswith(name + " "))
    return line.strip("│▁▂▃▄▅▆▇█ ").split()


async def test_a_fixed_k_runs_plain_first_prompt_says_plain_first_not_off():
    first_round = next(i for i, e in enumerate(TUI_EVENTS) if isinstance(e, RoundVerified))
    events = TUI_EVENTS[: first_round + 5]  # rewrite-0's plain decode, before its decode at k=3
    assert [e.draft_len for e in events if isinstance(e, PromptStarted)] == [0]
    app = prefilled(events)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, events)
        title = screen_lines(app)[0]
        assert " · ngram plain first · " in title, title
        assert class_line(app, "rewrite")[-2:] == ["plain", "first"]


def policy_starts_chat_off(events) -> list:
    """session-tui as a policy that runs chat plain from the start would have logged it: chat's decodes at
    k=3 left out, a PolicyLoaded after the header."""
    spec = {(e.prompt_id, e.draft_len) for e in events if isinstance(e, PromptStarted) and e.prompt_class == "chat"}
    kept = [
        e
        for e in events
        if not (getattr(e, "prompt_class", "") == "chat" and (e.prompt_id, e.draft_len) in spec and e.draft_len)
    ]
    classes = [ClassInForce("chat", False, 3), ClassInForce("rewrite", True, 3)]
    policy = policy_loaded(session_id=events[0].session_id, t=events[0].t, classes=classes)
    return kept[:1] + [policy] + kept[1:]


async def test_a_class_its_policy_runs_plain_shows_its_plain_rounds_and_goodput():
    events = policy_starts_chat_off(TUI_EVENTS)
    plain = class_stats(events)["chat"].baseline
    assert plain.rounds > 0 and set(class_stats(events)["chat"].runs) == {0}
    assert any(isinstance(e, PromptFinished) and e.prompt_class == "chat" for e in events)
    app = prefilled(events)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, events)
        assert class_line(app, "chat") == [
            "chat",
            "0",
            str(plain.rounds),
            "-",
            "-",
            "-",
            f"{plain.tok_per_s:.1f}",
            "t/s",
            "off",
        ]
        assert class_line(app, "rewrite")[-1] == "on"


@pytest.mark.parametrize(
    "value, shown", [(7.84, "7.8 t/s"), (9.96, "10 t/s"), (15.3, "15 t/s"), (999.4, "999 t/s"), (12_345.0, "12k t/s")]
)
def test_plain_goodput_leaves_a_blank_before_the_speedup_column(value, shown):
    from specmon.tui.rows import CLASS_COLUMNS, tok_per_s

    width = next(w for key, _, w, _ in CLASS_COLUMNS if key == "speedup")
    assert tok_per_s(value) == shown and len(shown) < width  # `-15.3 t/s` read as a negative goodput


# -- 6. a replay opened at the end shows no notice the live view had cleared --------------------------


def reloaded_midway(events) -> tuple[list, int]:
    """The policy fixture with an edit taken halfway through, far more than RELOAD_NOTICE_S before its end."""
    first = next(e for e in events if isinstance(e, PolicyLoaded))
    middle = len(events) // 2
    edit = msgspec.structs.replace(first, t=events[middle].t, sha256="b" * 64, changed=["rewrite"])
    assert events[-1].t - edit.t > 30
    return events[:middle] + [edit] + events[middle:], middle


async def test_a_replay_opened_at_the_end_shows_no_reload_notice_the_live_view_had_cleared(tmp_path):
    events, middle = reloaded_midway(POLICY_EVENTS)
    log = write_log(tmp_path / "reloaded.specmon", events)
    app = make_app(ReplayFeed(log, speed=0.0))
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot)
        assert app.state.reloaded is not None and app.state.events_seen == len(events)
        assert not app.screen.query_one("#policy-notice").display
        assert "policy reloaded" not in "\n".join(screen_lines(app))


async def test_a_replay_just_past_the_reload_still_shows_its_notice(tmp_path):
    events, middle = reloaded_midway(POLICY_EVENTS)
    log = write_log(tmp_path / "reloaded.specmon", events)
    after = next(e for e in events[middle + 1 :] if isinstance(e, RoundVerified))
    feed = ReplayFeed(log, speed=1.0)
    app = make_app(feed)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("space")
        await pilot.press("g", *f"r{after.round_id}", "enter")
        await shown_until(pilot, lambda: app.state.reloaded is not None, "the jump past the reload taken")
        assert "policy reloaded" in "\n".join(screen_lines(app))


# -- 5. at 80×24 five classes fit whole, the text keeps two lines, the notice hides no border ---------

CLASSES = ("chat", "code-new", "code-edit", "rewrite", "non-english")  # the policy fixture's five


@needs_tmux
def test_replay_at_80x24_shows_five_classes_whole_and_two_lines_of_text():
    screen = tmux_replay(
        FIXTURES / "session-policy.specmon", lambda s: "ended" in s, "the replay drawn to its end", "layout"
    ).splitlines()
    top = next(i for i, line in enumerate(screen) if line.startswith("╭─ classes "))
    rows = screen[top + 2 : top + 7]
    assert [line.strip("│ ").split()[0] for line in rows] == list(CLASSES), screen
    assert screen[top + 7].startswith("╰───") and not any(ch in "▁▂▃▄▅▆▇█" for line in rows for ch in line[:62])
    text = next(i for i, line in enumerate(screen) if line.startswith("╭─ text "))
    assert screen[text + 3].startswith("╰") and "Apreter! Apreter!" in screen[text + 2], screen
    assert screen[text + 1].strip("│ ") == "── non-english-3 [non-english] k=4 ──"


async def test_the_decisions_scrollbar_keeps_a_blank_column_from_the_class_names():
    events = with_more_decisions(8, ("non-english",))  # the longest class name
    app = prefilled(events)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, events)
        rows = [line[1:-1] for line in region_lines(app, "decisions")[2:-1]]  # inside the border, under the header
        assert len(rows) == 5 and all(row[:-1].split()[-1] == "non-…" for row in rows), rows  # cut, and says so
        assert any(row[-1] in "▁▂▃▄▅▆▇█" for row in rows), rows  # 10 decisions in 5 rows: a scrollbar
        assert all(row[-2] == " " for row in rows), rows  # and a blank column between it and the names


async def test_a_refused_edit_at_80x24_takes_the_texts_rows_and_hides_no_border():
    from test_tui_policy import ERROR, refused, squash

    events = POLICY_EVENTS[:-1] + [refused()] + POLICY_EVENTS[-1:]
    app = prefilled(events)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, events)
        screen = screen_lines(app)
        classes = region_lines(app, "classes")
        assert len(classes) == 8 and classes[-1].startswith("╰") and classes[-1].endswith("╯")
        assert screen[18] == classes[-1] + region_lines(app, "decisions")[-1]  # both panes' feet, whole
        assert screen[19].startswith("─ policy edit refused ─")  # under them, in the text's rows
        assert squash(ERROR) in squash(" ".join(screen[20:23]))
        assert "╭─ text" not in "\n".join(screen)


async def test_the_text_pane_has_no_scrollbar_over_its_lines_after_text_only_and_back():
    app = prefilled(POLICY_EVENTS)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, POLICY_EVENTS)
        await pilot.press("t")
        await pilot.pause()
        await pilot.press("t")
        await pilot.pause()
        await pilot.pause()
        inside = [line[1:-1] for line in region_lines(app, "text-box")[1:-1]]
        assert inside and not any(mark in line for line in inside for mark in "▁▂▃▄▅▆▇█"), inside  # it drew ▃▃
