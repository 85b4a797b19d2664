"""The live view whole at 80×24: help, jump box, text-only, the end of a run, the decisions pane,
the footer, the title and the too-small screen. Each test reads the screen as a user sees it."""

from __future__ import annotations

from pathlib import Path

from specmon.events.log import read_log
from specmon.events.schema import (
    Decision,
    PromptFinished,
    RoundVerified,
    Sampling,
    SessionFinished,
    SessionStarted,
)
from specmon.replay.player import ReplayFeed
from specmon.transport.channel import Subscription
from specmon.tui.factory import make_app
from specmon.tui.feed import Feed
from specmon.tui.screens import DecisionScreen, HelpScreen, JumpScreen
from waiting import drawn, resized, screen_lines, shown_until
from events import prompt_started, round_verified, session_started

FIXTURES = Path(__file__).resolve().parent / "fixtures"
POLICY_LOG = FIXTURES / "session-policy.specmon"
POLICY_EVENTS = list(read_log(POLICY_LOG))
TUI_EVENTS = list(read_log(FIXTURES / "session-tui.specmon"))


def prefilled(events, title: str = "fixture"):
    """A live app with every event buffered before it starts: one batch, so every frame is the same."""
    sub = Subscription(maxlen=len(events) + 1)
    for event in events:
        sub.offer(event)
    feed = Feed(sub, title)
    feed.done.set()
    return make_app(feed)


def region_lines(app, widget_id: str) -> list[str]:
    """The lines of the screen a widget covers, its border included."""
    region = app.screen.query_one(f"#{widget_id}").region
    return [line[region.x : region.right] for line in screen_lines(app)[region.y : region.bottom]]


# -- help and the jump box ------------------------------------------------------------------------


async def test_help_shows_its_whole_text_at_80x24():
    app = prefilled(POLICY_EVENTS)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, POLICY_EVENTS)
        await pilot.press("question_mark")
        await shown_until(pilot, lambda: isinstance(app.screen, HelpScreen), "the help screen open")
        screen = "\n".join(screen_lines(app))
        for phrase in (
            "speculative decoding, round by round",
            "acceptance  accepted/proposed per round",
            "speed       speedup = goodput at k / plain (k=0 rounds), same class",
            "not yet known",
            "rejections  where the first rejection fell",
            "decisions   the policy's decisions",
            "memory      VRAM and RSS in use",
            "requests    (serve) waiting; decoding: endpoint id [class] k",
            "Keys: p pause view",
            "Press any key to close.",
        ):
            assert phrase in screen, phrase
        await pilot.press("x")  # any key closes it
        await shown_until(pilot, lambda: not isinstance(app.screen, HelpScreen), "the help screen closed")
        assert "Press any key to close." not in "\n".join(screen_lines(app))


async def test_jump_box_takes_typing_at_once_and_shows_its_whole_hint():
    feed = ReplayFeed(POLICY_LOG, speed=1.0)
    app = make_app(feed)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("space")  # pause the replay
        await pilot.press("g")
        await shown_until(pilot, lambda: isinstance(app.screen, JumpScreen), "the jump box open")
        screen = "\n".join(screen_lines(app))
        assert "jump to r<round id>, p:<prompt id> or d<decision id>" in screen
        position = feed.position
        await pilot.press("r", "5", "enter")  # no Tab, no click: the box has the focus
        await shown_until(
            pilot, lambda: not isinstance(app.screen, JumpScreen) and feed.position != position, "the jump taken"
        )
        rounds = [e for e in POLICY_EVENTS if isinstance(e, RoundVerified)]
        assert rounds[5].round_id == 5
        assert app.state.rounds_seen == 6
        assert feed.position == POLICY_EVENTS.index(rounds[5]) + 1


# -- text only and the end of a run -------------------------------------------------------------


async def text_only(app, pilot, on: bool) -> None:
    """Press t and wait until the text-only layout is `on` (or off) and drawn."""
    await pilot.press("t")
    await shown_until(
        pilot, lambda: app.screen.query_one("#main").has_class("text-only") == on, f"text only {'on' if on else 'off'}"
    )


async def test_text_only_gives_the_text_the_whole_screen():
    app = prefilled(POLICY_EVENTS)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, POLICY_EVENTS)
        await text_only(app, pilot, True)
        box = app.screen.query_one("#text-box")
        assert box.region.height == 24 - 2  # all but the title line and the footer
        text = [line for line in region_lines(app, "text-box")[1:-1] if line.strip("│ ")]
        assert len(text) >= 18
        assert "Apreter! Apreter!" in text[-1]  # the newest text, at the bottom
        assert not app.screen.query_one("#speed").display or app.screen.query_one("#speed").region.height == 0
        await text_only(app, pilot, False)
        assert app.screen.query_one("#speed").region.height > 0


async def test_text_pane_is_not_blank_when_the_run_ends_on_newlines():
    """rewrite-3 stops at max_new_tokens right after two newlines: the pane must still show text."""
    end = next(i for i, e in enumerate(POLICY_EVENTS) if isinstance(e, PromptFinished) and e.prompt_id == "rewrite-3")
    events = POLICY_EVENTS[: end + 1] + [SessionFinished(session_id="s", t=0.0, rounds=0, reason="done")]
    app = prefilled(events)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, events)
        shown = region_lines(app, "text-box")[1:-1]
        assert "together." in shown[-1], shown


# -- the decisions pane ----------------------------------------------------------------------------


def with_more_decisions(count: int, classes: tuple[str, ...] = ("rewrite", "code-edit")) -> list:
    """The policy fixture with `count` more decisions at its end (ids after the logged ones), on `classes` in turn."""
    first = next(e for e in POLICY_EVENTS if isinstance(e, Decision))
    extra = [
        Decision(
            **{
                **{f: getattr(first, f) for f in first.__struct_fields__},
                "decision_id": 2 + i,
                "prompt_class": classes[i % len(classes)],
                "speculate_from": True,
                "speculate_to": True,
                "k_from": 4,
                "k_to": 4 + i % 3,
            }
        )
        for i in range(count)
    ]
    return POLICY_EVENTS[:-1] + extra + POLICY_EVENTS[-1:]


async def test_decisions_pane_follows_the_newest_decision():
    events = with_more_decisions(8)
    app = prefilled(events)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, events)
        table = app.screen.query_one("#decisions")
        assert table.row_count == 10
        assert table.cursor_row == 9
        shown = "\n".join(region_lines(app, "decisions"))
        assert "9  k4→5" in shown  # the newest decision is on screen


async def test_decisions_pane_stops_following_once_the_user_moves_up():
    sub = Subscription(maxlen=10_000)
    feed = Feed(sub, "live")
    app = make_app(feed)
    events = with_more_decisions(4)
    cut = len(events) - 3
    async with app.run_test(size=(80, 24)) as pilot:
        for event in events[:cut]:
            sub.offer(event)
        await drawn(app, pilot, events[:cut])
        table = app.screen.query_one("#decisions")
        assert table.cursor_row == table.row_count - 1
        table.move_cursor(row=0)
        for event in events[cut:]:
            sub.offer(event)
        await drawn(app, pilot, events)
        assert table.row_count == 6 and table.cursor_row == 0


# -- 80 columns: footer, rejections, classes, title ---------------------------------------------


async def test_replay_footer_shows_every_replay_key_at_80_columns():
    app = make_app(ReplayFeed(POLICY_LOG, speed=0.0))
    async with app.run_test(size=(80, 24)) as pilot:
        await shown_until(pilot, lambda: screen_lines(app)[-1].strip(), "the footer drawn")
        footer = screen_lines(app)[-1]
        for key in ("␣ play", "n step", "s speed", "g jump", "? help", "q quit"):
            assert key in footer, footer


def k7_session(rounds: int = 40) -> list:
    """A short synthetic session at k = 7: first rejections at every position, some all accepted,
    some rounds that proposed nothing."""
    sampling = Sampling()
    events = [
        session_started(session_id="20260101-000000-abc123", host={"hostname": "box"}),
        prompt_started(prompt_id="code-0", prompt_class="code", draft_len=7, sampling=sampling, max_new_tokens=500),
    ]
    for i in range(rounds):
        proposed = [] if i % 9 == 8 else [1] * 7
        accepted = 0 if not proposed else (i % 8 if i % 8 < 7 else 7)
        rejection = None if not proposed or accepted == 7 else accepted
        events.append(
            round_verified(
                t=float(i),
                round_id=i,
                prompt_id="code-0",
                prompt_class="code",
                round_index=i,
                draft_len=7,
                proposed=proposed,
                accepted=accepted,
                rejection_pos=rejection,
                emitted=[5] * (accepted + 1),
                draft_ms=0.1,
                verify_ms=50.0 + i % 5,
                overhead_ms=1.0,
                target_probs=[0.5] * len(proposed),
                sampling=sampling,
                mem_bytes=1 << 30,
                final_text=" x",
            )
        )
    return events


async def test_rejections_pane_shows_all_seven_positions_at_80_columns():
    events = k7_session()
    app = prefilled(events)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, events)
        run = app.state.current_run()
        shown = region_lines(app, "rejections")
        pos = next(line for line in shown if line.startswith("│ pos"))
        assert pos.split()[2:-1] == ["0", "1", "2", "3", "4", "5", "6", "all", "acc"]  # "all accepted", cut to fit
        rej = next(line for line in shown if line.startswith("│ rej")).split()[2:-1]
        assert rej == [str(c) for c in run.rejections] + [str(run.all_accepted)]
        a_i = next(line for line in shown if line.startswith("│ a_i")).split()[2:-1]
        assert a_i == [f"{a:.2f}"[1:] if a < 0.995 else "1.0" for a in run.per_position]


async def chat_in_view(app, pilot) -> None:
    """Move the classes table's cursor to its first row, chat: 4 of 5 rows fit at 80×24."""
    app.screen.query_one("#classes").move_cursor(row=0)
    await shown_until(
        pilot, lambda: any(line.startswith("│chat") for line in region_lines(app, "classes")), "chat's row in view"
    )


async def test_class_table_shows_on_and_off_whole_at_80_columns():
    app = prefilled(POLICY_EVENTS)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, POLICY_EVENTS)
        table = app.screen.query_one("#classes")
        assert str(table.get_row_at(table.cursor_row)[0]) == "non-english"  # the class the panes show, in view
        assert any(line.startswith("│non-english") for line in region_lines(app, "classes"))
        await chat_in_view(app, pilot)
        shown = region_lines(app, "classes")
        chat = next(line for line in shown if line.startswith("│chat"))
        assert "off d0 " in chat
        code_edit = next(line for line in shown if line.startswith("│code-edit"))
        assert code_edit.rstrip("│▆▁▂▃▄▅▇█ ").endswith(" on")


async def test_title_names_the_session_and_the_policy_not_a_profile_k():
    app = prefilled(POLICY_EVENTS, "smollm2-cpu: ngram k=4, greedy")
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, POLICY_EVENTS)
        title = screen_lines(app)[0]
        assert "c10aa0 smollm2-cpu@vm" in title
        assert "policy" in title and "k=4" not in title
        assert "523 rounds" in title and "ended at 01:45:29" in title


async def test_title_names_the_k_in_force_without_a_policy():
    app = prefilled(TUI_EVENTS)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, TUI_EVENTS)
        title = screen_lines(app)[0]
        session = next(e for e in TUI_EVENTS if isinstance(e, SessionStarted))
        assert session.session_id.rsplit("-", 1)[-1] in title
        assert "k=3" in title


# -- too small -------------------------------------------------------------------------------------


async def test_too_small_terminal_says_so_and_recovers():
    app = prefilled(POLICY_EVENTS)
    async with app.run_test(size=(60, 20)) as pilot:
        await drawn(app, pilot, POLICY_EVENTS)
        screen = "\n".join(screen_lines(app))
        assert "terminal too small: 60×20, need 70×20" in screen
        assert "acceptance" not in screen
        await resized(pilot, 69, 30)
        assert "terminal too small: 69×30, need 70×20" in "\n".join(screen_lines(app))
        await resized(pilot, 80, 24)
        screen = "\n".join(screen_lines(app))
        assert "too small" not in screen
        assert "acceptance · non-english k=4" in screen and "c10aa0" in screen


async def test_a_click_selects_a_decision_and_shows_its_rounds():
    app = prefilled(POLICY_EVENTS)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, POLICY_EVENTS)
        first = next(e for e in POLICY_EVENTS if isinstance(e, Decision))
        table = app.screen.query_one("#decisions")
        assert table.cursor_row == 1  # following the newest
        await pilot.click("#decisions", offset=(2, 2))  # row 0: the cursor moves there
        await pilot.click("#decisions", offset=(2, 2))  # and a second click selects it
        await shown_until(pilot, lambda: isinstance(app.screen, DecisionScreen), "the decision's detail open")
        assert table.cursor_row == 0
        shown = " ".join(" ".join(line.split()) for line in screen_lines(app))  # the detail as drawn
        assert f"│ decision {first.decision_id} [{first.prompt_class}] off" in shown, shown
        assert f"cited {len(first.round_ids)} rounds" in shown
