"""Where the TUI's events come from (a live channel, an attached socket, or a log file), and the View that
drains them: a thread only offers events to a bounded Subscription, and only the View touches a widget."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from textual.app import App
from textual.drivers.linux_driver import LinuxDriver

from specmon.errors import SpecmonError
from specmon.events.log import read_log
from specmon.transport.channel import Subscription
from specmon.tui.driver import HangupDriver
from specmon.tui.panes import Pane, TitleBar

HEADER_WAIT_S = 10.0  # how long an attach may take to bring its session's header before the app starts anyway


@dataclass(eq=False)
class Feed:
    subscription: Subscription
    title: str
    url: str = ""  # a server's address for clients, shown on its requests pane
    header_wait_s: float = 0.0  # a live session's header is published before its app starts: no wait
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)
    held: list = field(default_factory=list)  # events drained early to read the header (first_event): handed out first

    def drain(self):
        held, self.held = self.held, []
        return held + self.subscription.drain() if held else self.subscription.drain()

    @property
    def skipped(self) -> int:
        return self.subscription.skipped


class View(App):
    """A view (rounds or a server's traffic, live or replayed) folding `feed` into `state`: each tick applies
    what was buffered as one batch, then redraws once (refresh_panes)."""

    TITLE = "specmon"
    AUTO_FOCUS = None  # nothing grabs focus on start, so the footer is the same on every start
    DRAIN_INTERVAL_S = 1 / 15  # redraw rate ceiling; each tick applies one whole batch
    State: type  # what the view folds its events into
    _drawn_end = False  # once the feed has ended and been drawn, idle ticks draw nothing
    paused = False

    def __init__(self, feed) -> None:
        super().__init__()
        self.feed = feed
        self.state = self.State()

    def get_driver_class(self):
        default = super().get_driver_class()  # Linux's, unless on Windows or overridden
        return HangupDriver if default is LinuxDriver else default  # a hang-up ends the app as `q` does

    def on_mount(self) -> None:  # Textual calls it after the view's own on_mount, which lays out its tables
        self.set_interval(self.DRAIN_INTERVAL_S, self.drain)
        self.refresh_panes()

    def drain(self) -> None:
        if not self.is_running:  # a tick while the app closes: its panes are going, nothing to draw
            return
        batch = self.feed.drain()
        self.state.apply(batch)
        ended_unseen = self.feed.done.is_set() and not self._drawn_end
        if not self.paused and (batch or ended_unseen):
            self._drawn_end = self.feed.done.is_set() and not batch  # the feed is over and fully drawn
            self.refresh_panes()

    def refresh_panes(self) -> None:
        main = self.screen_stack[0]  # the view, under any screen opened over it
        for pane in main.query(Pane):
            pane.redraw()
        self._show_status()

    def _show_status(self) -> None:
        for bar in self.screen_stack[0].query("#title").results(TitleBar):  # none while the view is being mounted
            bar.refresh()
        self.sub_title = self._title().plain

    def _lead(self) -> str:
        """What goes first in the title (a replay's position and state)."""
        return ""

    def _alerts(self) -> list[str]:
        """What the title warns of: the view paused, events skipped (drawn slower than they came), the feed's error."""
        said = ["VIEW PAUSED"] if self.paused else []
        if self.feed.skipped:  # a Feed's, or a replay.player.ReplayFeed's: both count what they skipped
            said.append(f"view skipped {self.feed.skipped} events")
        if self.feed.error:
            said.append(self.feed.error)
        return said

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        if self.paused:
            self._show_status()  # the panes keep what they show until it resumes
        else:
            self.refresh_panes()


def thread_feed(events: Callable[[], Iterable], title: str, maxlen: int = 100_000) -> Feed:
    """Run `events()` on a thread and buffer what it yields (attach, replay)."""
    feed = Feed(Subscription(maxlen), title, header_wait_s=HEADER_WAIT_S)  # an attach's header comes over the socket

    def pump() -> None:
        try:
            for event in events():
                feed.subscription.offer(event)
        except SpecmonError as exc:
            feed.error = str(exc)
        finally:
            feed.done.set()

    threading.Thread(target=pump, name="specmon-feed", daemon=True).start()
    return feed


def first_event(feed):
    """The feed's header, or None: read from a replayed log's start, or awaited live (and kept to drain again)."""
    if not isinstance(feed, Feed):
        try:
            return next(iter(read_log(feed.path)), None)
        except (SpecmonError, OSError):
            return None  # the replay says what is wrong with the log
    deadline = time.monotonic() + feed.header_wait_s
    while not feed.held and not feed.done.is_set() and time.monotonic() < deadline:
        feed.held = feed.subscription.drain()
        if not feed.held:
            feed.done.wait(0.02)
    feed.held = feed.held or feed.subscription.drain()  # what came just before the end
    return feed.held[0] if feed.held else None
