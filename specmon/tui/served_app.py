"""A server's traffic (a watch, a proxy), live, attached or replayed: acceptance, rates, state, totals, classes."""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid
from textual.widgets import Footer

from specmon.errors import SpecmonError
from specmon.events.schema import ServerScraped
from specmon.replay.player import ReplayFeed
from specmon.tui import served_panes as sp
from specmon.tui.feed import View, first_event
from specmon.tui.panes import Pane, TitleBar
from specmon.tui.replay_keys import ReplayKeys, replay_bindings
from specmon.tui.served_state import ServedState

# (title, id, renderer, fitted: given the pane's height, recent: titled with the span its figures cover)
PANES = [
    ("acceptance", "acceptance", sp.render_acceptance, True, True),
    ("by position", "positions", sp.render_positions, True, True),
    ("rates · last read's window", "rates", sp.render_rates, False, False),
    ("server", "server", sp.render_server, False, False),
    ("totals · whole session", "totals", sp.render_totals, True, False),
    ("requests by class · whole session", "classes", sp.render_classes, True, False),
]


class ServedApp(View):
    DRAIN_INTERVAL_S = 1 / 10  # a watch reads once a second: ten redraws a second at most is plenty
    State = ServedState
    CSS = """
    #served { grid-size: 2 3; grid-rows: 7 6 1fr; grid-columns: 1fr 1fr; height: 1fr; }
    #served Pane { border: round $primary-darken-1; border-title-color: $text; padding: 0 1; height: 100%; }
    #served Pane { border-subtitle-color: $text-muted; }
    TitleBar { height: 1; background: $panel; }
    """
    BINDINGS = [
        Binding("p", "toggle_pause", "pause", tooltip="Stop refreshing panes; reading and logging go on"),
        Binding("q", "quit", "quit"),
    ]

    def compose(self) -> ComposeResult:
        yield TitleBar(self._title, id="title")
        with Grid(id="served"):
            for title, pane_id, render, fitted, recent in PANES:
                title_to = self._recent_title(title) if recent else None
                yield Pane(title, self._drawn(render, pane_id, fitted), title_to, id=pane_id)
        yield Footer(compact=True, show_command_palette=False)

    def _drawn(self, render, pane_id: str, fitted: bool):
        """`render` at the pane's width; where `fitted`, its height too (None before layout), so it fits its lines."""
        if not fitted:
            return lambda width: render(self.state, width)
        return lambda width: render(self.state, width, self.query_one(f"#{pane_id}", Pane).content_size.height or None)

    def _recent_title(self, what: str):
        """A pane title that says the span its figures cover (sp.recent_span)."""
        return lambda width: f"{what} · {sp.recent_span(self.state.recent())}"

    def _title(self, width: int = 0):
        return sp.title(self.state, self.feed.title, self._alerts(), width or 200, self._lead())


def jump_to_read(feed: ReplayFeed, at: str) -> list:
    """Events up to the first read at or after `at` (HH:MM:SS or HH:MM on the day the log began, or the next
    where that had passed); as ReplayFeed.jump, a time past the log's end raises and changes nothing."""
    seconds = at.count(":") == 2
    try:
        clock = time.strptime(at, "%H:%M:%S" if seconds else "%H:%M")
    except ValueError:
        raise SpecmonError(f"jump target {at!r}: use HH:MM:SS (a read's time) or d<decision id>") from None
    header = first_event(feed)
    began = time.localtime(header.t if header is not None else time.time())
    day = time.mktime((*began[:3], clock.tm_hour, clock.tm_min, clock.tm_sec, 0, 0, -1))
    typed_span = 1 if seconds else 60  # HH:MM means its whole minute, the one the log began in too
    passed = header is not None and day + typed_span <= header.t
    since = day + 86_400 if passed else day  # the log ran past midnight
    read_since = lambda ev: isinstance(ev, ServerScraped) and ev.t >= since  # noqa: E731
    return feed.jump_to(read_since, f"no read at or after {at} in {feed.path.name}")


class ServedReplayApp(ReplayKeys, ServedApp):
    """The served view fed from its log: a step is the next read of the server, a jump a read's time or a decision."""

    BINDINGS = replay_bindings("Advance to the next read of the server", "Jump to a read's time or a routing decision")
    JUMP_HINT = "jump to a read's time [b]HH:MM:SS[/] or a routing [b]d[/]<decision id>"  # what a served log has
    JUMP_EXAMPLES = "02:58:40, d3"
    STEPS_TO = ServerScraped  # the next read of the server: a served log has no round

    def jump(self, target: str) -> list:
        """A read's time (HH:MM:SS), else what ReplayFeed.jump takes (d<decision id>)."""
        return jump_to_read(self.feed, target) if target[:1].isdigit() else self.feed.jump(target)
