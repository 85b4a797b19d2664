"""The same monitor, fed from a log: play/pause, step a round, change speed, jump."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Input

from specmon.errors import SpecmonError
from specmon.replay.player import ReplayFeed
from specmon.tui.app import SpecmonApp
from specmon.tui.state import ViewState


class JumpScreen(ModalScreen[str]):
    BINDINGS = [Binding("escape", "app.pop_screen", "cancel")]

    def compose(self) -> ComposeResult:
        yield Input(placeholder="jump to: r<round id>  p:<prompt id>  d<decision id>", id="jump")

    def on_input_submitted(self, message: Input.Submitted) -> None:
        self.dismiss(message.value.strip())


class ReplayApp(SpecmonApp):
    BINDINGS = [
        Binding("space", "play_pause", "play/pause", tooltip="Pause or resume the replay"),
        Binding("n", "step", "step", tooltip="Advance to the next round"),
        Binding("s", "speed", "speed", tooltip="1×, 10×, as fast as possible"),
        Binding("g", "jump", "jump", tooltip="Jump to a round, a prompt or a decision"),
    ]

    feed: ReplayFeed

    def apply_now(self, batch) -> None:
        if self.feed.restarted:  # a jump back: fold again from the first event
            self.feed.restarted = False
            self.state = ViewState()
            self.query_one("#decisions").clear()
            self.query_one("#classes").clear()
        self.state.apply(batch)
        self.refresh_panes()

    def action_play_pause(self) -> None:
        self.feed.toggle()
        self.sub_title = self._status()

    def action_step(self) -> None:
        self.apply_now(self.feed.step())

    def action_speed(self) -> None:
        speed = self.feed.cycle_speed()
        self.notify(f"replay speed {'as fast as possible' if speed == 0 else f'{speed:g}×'}")

    def action_jump(self) -> None:
        def jump(target: str | None) -> None:
            if not target:
                return
            try:
                self.apply_now(self.feed.jump(target))
            except SpecmonError as exc:
                self.notify(str(exc), severity="error")
        self.push_screen(JumpScreen(), jump)

    def _status(self) -> str:
        feed = self.feed
        speed = "max" if feed.speed == 0 else f"{feed.speed:g}×"
        mode = "playing" if feed.playing else "paused"
        return f"{mode} {speed} · event {feed.position} · " + super()._status()
