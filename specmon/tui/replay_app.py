"""The same monitor, fed from a log: play/pause, step a round, change speed, jump (ReplayKeys)."""

from __future__ import annotations

from textual.widgets import DataTable

from specmon.tui.app import SpecmonApp
from specmon.tui.replay_keys import ReplayKeys, replay_bindings


class ReplayApp(ReplayKeys, SpecmonApp):
    REPLAY = True
    BINDINGS = replay_bindings("Advance to the next round", "Jump to a round, a prompt or a decision")

    def apply_now(self, batch) -> None:
        if self.feed.restarted:  # a jump back: the text and the tables start again too
            self._text_version = -1
            self._cursor_class = ""
            for table in self.screen_stack[0].query(DataTable):
                table.clear()
        super().apply_now(batch)
