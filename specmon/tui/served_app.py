"""The live view of a server's traffic (a watch, a proxy), live, attached or replayed: acceptance over
recent windows, by position, rates and queue, the server's state, totals, and requests by class."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Grid
from textual.widgets import Footer

from specmon.tui import served_panes as sp
from specmon.tui.driver import driver_for
from specmon.tui.feed import Draining, alerts
from specmon.tui.panes import Pane, TitleBar
from specmon.tui.served_state import ServedState

DRAIN_INTERVAL_S = 1 / 10  # a watch reads once a second: ten redraws a second at most is plenty


class ServedApp(Draining, App):
    TITLE = "specmon"
    AUTO_FOCUS = None
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

    def __init__(self, feed, state: ServedState | None = None):
        super().__init__()
        self.feed = feed
        self.state = state or ServedState()
        self.paused = False

    def get_driver_class(self):
        return driver_for(super().get_driver_class())  # a terminal that hangs up ends the app as `q` does

    def compose(self) -> ComposeResult:
        yield TitleBar(self._title, id="title")
        with Grid(id="served"):
            yield Pane(
                "acceptance",
                self._draw_fitted(sp.render_acceptance, "acceptance"),
                self._recent_title("acceptance"),
                id="acceptance",
            )
            yield Pane(
                "by position",
                self._draw_fitted(sp.render_positions, "positions"),
                self._recent_title("by position"),
                id="positions",
            )
            yield Pane("rates · last read's window", self._draw(sp.render_rates), id="rates")
            yield Pane("server", self._draw(sp.render_server), id="server")
            yield Pane("totals · whole session", self._draw_fitted(sp.render_totals, "totals"), id="totals")
            yield Pane(
                "requests by class · whole session", self._draw_fitted(sp.render_classes, "classes"), id="classes"
            )
        yield Footer(compact=True, show_command_palette=False)

    def _draw(self, render):
        return lambda width: render(self.state, width)

    def _recent_title(self, what: str):
        """A pane title that says the span its figures cover (sp.recent_span)."""
        return lambda width: f"{what} · {sp.recent_span(self.state.recent())}"

    def _draw_fitted(self, render, pane_id: str):
        """render given the pane's height too, so it fits its lines rather than have the last ones cut."""
        return lambda width: render(self.state, width, self._height(pane_id))

    def _height(self, pane_id: str) -> int | None:
        """The pane's inner height; None before its first layout (no limit then: a resize redraws it)."""
        return self.query_one(f"#{pane_id}", Pane).content_size.height or None

    def on_mount(self) -> None:
        self.set_interval(DRAIN_INTERVAL_S, self.drain)
        self.refresh_panes()

    def refresh_panes(self) -> None:
        main = self.screen_stack[0]  # the view, under any screen opened over it
        for pane in main.query(Pane):
            pane.redraw()
        for bar in main.query("#title").results(TitleBar):  # none while the view is still being mounted
            bar.redraw()
        self.sub_title = self._title().plain

    def _lead(self) -> str:
        """What goes before the server's name in the title (a replay's state)."""
        return ""

    def _title(self, width: int = 0):
        return sp.title(self.state, self.feed.title, alerts(self.feed, self.paused), width or 200, self._lead())

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        self.refresh_panes()
