"""The replay's keys for both views fed from a log: space play/pause, n step, s speed, g jump, and the replay's
state leading the title. A view says what a step takes (STEPS_TO) and what g takes (jump, JUMP_HINT)."""

from __future__ import annotations

from textual.binding import Binding

from specmon.events.schema import RoundVerified
from specmon.replay.player import ReplayFeed
from specmon.tui.screens import JumpScreen


def replay_bindings(step: str, jump: str) -> list[Binding]:
    """The replay's keys, `step` and `jump` their tooltips; p's pause leaves the footer to them (80 columns)."""
    return [
        Binding("space", "play_pause", "play", key_display="␣", tooltip="Pause or resume the replay"),
        Binding("n", "step", "step", tooltip=step),
        Binding("s", "speed", "speed", tooltip="1×, 10×, as fast as possible"),
        Binding("g", "jump", "jump", tooltip=jump),
        Binding(
            "p",
            "toggle_pause",
            "pause view",
            show=False,
            tooltip="Stop refreshing panes (the replay goes on: space pauses it)",
        ),
    ]


class ReplayKeys:
    """The replay's actions, mixed in before a view's App class; STEPS_TO and jump are the rounds' by default."""

    feed: ReplayFeed
    JUMP_HINT = "jump to [b]r[/]<round id>, [b]p:[/]<prompt id> or [b]d[/]<decision id>"
    JUMP_EXAMPLES = "r120, p:chat-2, d3"
    STEPS_TO: type = RoundVerified  # n takes everything up to and including the next event of this type

    def action_play_pause(self) -> None:
        self.feed.toggle()
        self._show_status()

    def action_step(self) -> None:
        self.apply_now(self.feed.step(self.STEPS_TO))

    def action_speed(self) -> None:
        self.feed.cycle_speed()
        self._show_status()  # the title leads with the speed: a toast would lie over the panes

    def action_jump(self) -> None:
        def jumped(batch: list | None) -> None:
            if batch is not None:
                self.apply_now(batch)

        self.push_screen(JumpScreen(self.jump, self.JUMP_HINT, self.JUMP_EXAMPLES), jumped)

    def apply_now(self, batch: list) -> None:
        """`batch` folded and drawn at once; after a jump back, folded again from the first event."""
        if self.feed.restarted:
            self.feed.restarted = False
            self.state = self.State()
        self.state.apply(batch)
        self.refresh_panes()

    def _lead(self) -> str:
        """`▶ 10× ev 81`: playing or not, the speed, and the events read so far (the title's front)."""
        speed = "max" if self.feed.speed == 0 else f"{self.feed.speed:g}×"
        mode = "▶" if self.feed.playing and not self.feed.done.is_set() else "⏸"
        return f"{mode} {speed} ev {self.feed.position}"

    def jump(self, target: str) -> list:
        """What g takes to: ReplayFeed.jump's targets; SpecmonError where there is none."""
        return self.feed.jump(target)
