"""The same monitor, fed from a log: play/pause, step a round, change speed, jump (ReplayKeys)."""

from __future__ import annotations

from textual.widgets import DataTable

from specmon.tui.app import SpecmonApp
from specmon.tui.replay_keys import ReplayKeys, replay_bindings
from specmon.tui.state import ViewState


class ReplayApp(ReplayKeys, SpecmonApp):
    REPLAY = True
    BINDINGS = replay_bindings("Advance to the next round", "Jump to a round, a prompt or a decision")

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

    def show_lead(self) -> None:
        self._show_status()

    def _tail(self) -> str:
        return self.feed.title
