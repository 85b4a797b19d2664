"""Every screen as a user sees it, at 60, 80, 100 and 160 columns: the live view (a policy session, a
fixed-k session, a served session), the served view (a watch with proxied requests), help and a decision's
detail. What must hold on each, read off the drawn screen (issue 61, point 2):
- each pane draws what its renderer fitted to that pane's own width, line for line: no line the terminal
  had to wrap, no line cut at the pane's edge;
- each pane's border title is drawn whole, or cut with …;
- the title bar states the figure the log gives (the rounds seen) unless it says it cut (…);
- an overlay's text is drawn whole, every word of it inside its box."""

from __future__ import annotations

import pytest
from rich.cells import cell_len
from rich.text import Text

from specmon.events.log import read_log
from specmon.events.schema import Decision
from specmon.tui.app import MIN_SIZE
from specmon.tui.factory import make_app
from specmon.tui.panes import Pane
from specmon.tui.rows import render_decision
from specmon.tui.screens import HELP, DecisionScreen
from test_tui_view import prefilled
from test_view_80x24 import FIXTURES, POLICY_EVENTS, TUI_EVENTS
from test_watch_tui import REQUESTS, WATCH
from test_watch_tui import prefilled as served_feed
from waiting import drawn, screen_lines, settled, shown_until

SIZES = [(60, 24), (80, 24), (100, 30), (160, 40)]
LIVE = {
    "policy": POLICY_EVENTS,
    "fixed k": TUI_EVENTS,
    "serve": list(read_log(FIXTURES / "session-serve.specmon")),
}


def drawn_lines(app, region) -> list[str]:
    return [line[region.x : region.right].rstrip() for line in screen_lines(app)[region.y : region.bottom]]


def pane_faults(app) -> list[str]:
    """Every pane whose drawn content is not its renderer's lines at its width, or whose title is not whole."""
    faults = []
    for pane in app.screen.query(Pane):
        if not pane.region.area:  # not shown on this screen (the requests row of a session that serves none)
            continue
        if pane.render_to is not None and pane.content_size.width:
            region = pane.content_region
            rendered = pane.render_to(region.width)
            lines = [
                line.rstrip() for line in (rendered.plain if isinstance(rendered, Text) else rendered).splitlines()
            ]
            wide = [line for line in lines if cell_len(line) > region.width]
            shown = drawn_lines(app, region)[: len(lines)]
            if wide or shown != lines[: region.height]:
                faults.append(f"#{pane.id} at {region.width}: rendered {lines} drawn {shown}")
        title, top = str(pane.border_title or ""), drawn_lines(app, pane.region)[0]
        if title and title not in top and "…" not in top:  # a fixed title too long is cut by Textual, marked
            faults.append(f"#{pane.id}'s title {title!r} not whole in {top!r}")
    return faults


def title_fault(app, rounds: int) -> str | None:
    top = screen_lines(app)[0].rstrip()
    said = f"{rounds} round" in top or "…" in top
    return None if said and cell_len(top) <= app.size.width else f"title {top!r}"


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", LIVE)
async def test_the_live_views_panes_and_title_fit_every_width(name, size):
    events = LIVE[name]
    app = prefilled(events)
    async with app.run_test(size=size) as pilot:
        await drawn(app, pilot, events)
        if size[0] < MIN_SIZE[0]:  # the view says it needs more room, in a line that fits
            lines = [line for line in screen_lines(app) if line.strip()]
            assert any("terminal too small" in line for line in lines) and all(len(x) <= size[0] for x in lines)
            return
        assert pane_faults(app) == []
        assert title_fault(app, app.state.rounds_seen) is None


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_served_views_panes_fit_every_width(size):
    app = make_app(served_feed(WATCH + REQUESTS))
    async with app.run_test(size=size) as pilot:
        await shown_until(pilot, lambda: app._drawn_end, "every event applied and drawn")
        assert pane_faults(app) == []
        top = screen_lines(app)[0].rstrip()
        assert ("llama-server" in top or "…" in top) and cell_len(top) <= size[0], top


def boxed_words(app) -> list[str]:
    """The words inside the overlay's box, as drawn (its border off)."""
    inside = [line.strip().strip("│").strip() for line in screen_lines(app) if line.strip().startswith("│")]
    return " ".join(inside).split()


@pytest.mark.parametrize("size", SIZES[1:], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_help_and_a_decisions_detail_are_drawn_whole_at_every_width(size):
    app = prefilled(POLICY_EVENTS)
    async with app.run_test(size=size) as pilot:
        await drawn(app, pilot, POLICY_EVENTS)
        await pilot.press("question_mark")
        await settled(pilot)
        help_words = " ".join(Text.from_markup(HELP).plain.split())
        assert help_words in " ".join(boxed_words(app)), boxed_words(app)
        await pilot.press("question_mark")
        first = next(e for e in POLICY_EVENTS if isinstance(e, Decision))
        detail = render_decision(first, [])
        app.push_screen(DecisionScreen(detail, first.decision_id))
        await shown_until(pilot, lambda: isinstance(app.screen, DecisionScreen), "the detail open")
        await settled(pilot)
        assert " ".join(detail.split()) in " ".join(boxed_words(app)), boxed_words(app)
