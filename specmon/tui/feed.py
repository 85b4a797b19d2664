"""Where the TUI's events come from: a live channel, an attached socket, or a log file.

A background thread only offers events to a bounded Subscription; the app drains it on a
timer. Nothing here touches a widget."""

from __future__ import annotations

import threading
from typing import Callable, Iterable

from specmon.errors import SpecmonError
from specmon.transport.channel import Subscription


class Feed:
    def __init__(self, subscription: Subscription, title: str):
        self.subscription = subscription
        self.title = title
        self.url = ""  # a server's address for clients, shown on its requests pane
        self.error: str | None = None
        self.done = threading.Event()

    def drain(self):
        return self.subscription.drain()

    @property
    def skipped(self) -> int:
        return self.subscription.skipped


def thread_feed(events: Callable[[], Iterable], title: str, maxlen: int = 100_000) -> Feed:
    """Run `events()` on a thread and buffer what it yields (attach, replay)."""
    feed = Feed(Subscription(maxlen), title)

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
