"""The one way an app is built: for `run`, `attach`, `replay` and the tests."""

from __future__ import annotations

from textual.app import App

from specmon.replay.player import ReplayFeed
from specmon.tui.app import SpecmonApp
from specmon.tui.feed import Feed, first_event
from specmon.tui.replay_app import ReplayApp
from specmon.tui.served_app import ServedApp
from specmon.tui.served_replay import ServedReplayApp
from specmon.tui.served_state import is_served


def make_app(feed: Feed | ReplayFeed) -> App:
    """The served view for a watch or proxy session, else the round monitor; with the replay's keys for a log."""
    replayed = isinstance(feed, ReplayFeed)
    if is_served(first_event(feed)):
        return ServedReplayApp(feed) if replayed else ServedApp(feed)
    return ReplayApp(feed) if replayed else SpecmonApp(feed)
