"""The one way an app is built: for `run`, `attach`, `replay` and the tests."""

from __future__ import annotations

from textual.app import App

from specmon.metrics.served import SERVED_BACKENDS
from specmon.replay.player import ReplayFeed
from specmon.tui.app import ReplayApp, SpecmonApp
from specmon.tui.feed import Feed, first_event
from specmon.tui.served_app import ServedApp, ServedReplayApp


def make_app(feed: Feed | ReplayFeed) -> App:
    """The served view for a watch or proxy session, else the round monitor; with the replay's keys for a log."""
    replayed = isinstance(feed, ReplayFeed)
    started = first_event(feed)
    if started is not None and started.backend in SERVED_BACKENDS:
        return ServedReplayApp(feed) if replayed else ServedApp(feed)
    return ReplayApp(feed) if replayed else SpecmonApp(feed)
