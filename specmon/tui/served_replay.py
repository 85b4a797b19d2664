"""The served view fed from its log: a step is the next read of the server, a jump a read's time or a decision."""

from __future__ import annotations

import time

from specmon.errors import SpecmonError
from specmon.events.schema import ServerScraped
from specmon.replay.player import ReplayFeed
from specmon.tui.feed import first_event
from specmon.tui.replay_keys import ReplayKeys, replay_bindings
from specmon.tui.served_app import ServedApp


def jump_to_read(feed: ReplayFeed, at: str) -> list:
    """Events up to the first read at or after `at` (HH:MM:SS or HH:MM on the day the log began, or the next
    where that had passed); as ReplayFeed.jump, a time past the log's end raises and changes nothing."""
    seconds = at.count(":") == 2
    try:
        clock = time.strptime(at, "%H:%M:%S" if seconds else "%H:%M")
    except ValueError:
        raise SpecmonError(f"jump target {at!r}: use HH:MM:SS (a read's time) or d<decision id>") from None
    header = first_event(feed)
    began = time.localtime(header.t if header is not None else time.time())
    day = time.mktime((*began[:3], clock.tm_hour, clock.tm_min, clock.tm_sec, 0, 0, -1))
    typed_span = 1 if seconds else 60  # HH:MM means its whole minute, the one the log began in too
    passed = header is not None and day + typed_span <= header.t
    since = day + 86_400 if passed else day  # the log ran past midnight
    read_since = lambda ev: isinstance(ev, ServerScraped) and ev.t >= since  # noqa: E731
    return feed.jump_to(read_since, f"no read at or after {at} in {feed.path.name}")


class ServedReplayApp(ReplayKeys, ServedApp):
    BINDINGS = replay_bindings("Advance to the next read of the server", "Jump to a read's time or a routing decision")
    JUMP_HINT = "jump to a read's time [b]HH:MM:SS[/] or a routing [b]d[/]<decision id>"  # what a served log has
    JUMP_EXAMPLES = "02:58:40, d3"

    def step_batch(self) -> list:
        """Everything up to and including the next read (ReplayFeed.step stops at a round: a served log has none)."""
        return self.feed.step(stop_after=lambda ev: isinstance(ev, ServerScraped))

    def jump(self, target: str) -> list:
        """A read's time (HH:MM:SS), else what ReplayFeed.jump takes (d<decision id>)."""
        return jump_to_read(self.feed, target) if target[:1].isdigit() else self.feed.jump(target)
