"""The same monitor, fed from a log: play/pause, step a round, change speed, jump."""

from __future__ import annotations

from textual.binding import Binding
from textual.widgets import DataTable

from specmon.replay.player import ReplayFeed
from specmon.tui.app import SpecmonApp
from specmon.tui.screens import JumpScreen
from specmon.tui.state import ViewState


class ReplayApp(SpecmonApp):
    REPLAY = True
    # Short descriptions, the replay's own keys first: all of them fit an 80-column footer.
    BINDINGS = [
        Binding("space", "play_pause", "play", key_display="␣", tooltip="Pause or resume the replay"),
        Binding("n", "step", "step", tooltip="Advance to the next round"),
        Binding("s", "speed", "speed", tooltip="1×, 10×, as fast as possible"),
        Binding("g", "jump", "jump", tooltip="Jump to a round, a prompt or a decision"),
        Binding(
            "p",
            "toggle_pause",
            "pause view",
            show=False,
            tooltip="Stop refreshing panes (the replay goes on: space pauses it)",
        ),
    ]

    feed: ReplayFeed

    def apply_now(self, batch) -> None:
        if self.feed.restarted:  # a jump back: fold again from the first event
            self.feed.restarted = False
            self.state = ViewState()
            self._text_version = -1
            self._cursor_class = ""
            main = self.screen_stack[0]
            main.query_one("#decisions", DataTable).clear()
            main.query_one("#classes", DataTable).clear()
        self.state.apply(batch)
        self.refresh_panes()

    def action_play_pause(self) -> None:
        self.feed.toggle()
        self._show_status()

    def action_step(self) -> None:
        self.apply_now(self.feed.step())

    def action_speed(self) -> None:
        self.feed.cycle_speed()
        self._show_status()  # the title leads with the speed: a toast would lie over the help and the text

    def action_jump(self) -> None:
        def jumped(batch: list | None) -> None:
            if batch is not None:
                self.apply_now(batch)

        self.push_screen(JumpScreen(self.feed.jump), jumped)

    def _lead(self) -> str:
        feed = self.feed
        speed = "max" if feed.speed == 0 else f"{feed.speed:g}×"
        mode = "▶" if feed.playing and not feed.done.is_set() else "⏸"
        return f"{mode} {speed} ev {feed.position}"

    def _tail(self) -> str:
        return self.feed.title
