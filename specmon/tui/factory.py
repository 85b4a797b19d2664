"""The one way an app is built: for `run`, `attach`, `replay` and the tests."""

from __future__ import annotations

from specmon.replay.player import ReplayFeed
from specmon.tui.app import SpecmonApp
from specmon.tui.feed import Feed
from specmon.tui.replay_app import ReplayApp


def make_app(feed: Feed | ReplayFeed) -> SpecmonApp:
    """A replay app (play, step, jump) for a log being replayed; the live monitor otherwise."""
    return ReplayApp(feed) if isinstance(feed, ReplayFeed) else SpecmonApp(feed)
