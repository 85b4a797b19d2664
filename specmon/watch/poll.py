"""The watch's loop: scrape every interval, publish each read as a ServerScraped event, and say (one
line) what changed: a window's figures, the server down, back or restarted."""

from __future__ import annotations

import itertools
import math
import threading
import time
from typing import Callable

import httpx
import msgspec

from specmon.events.schema import ServerScraped
from specmon.metrics import served
from specmon.watch import lines
from specmon.watch.scrape import scrape


class Watcher:
    """Reads one server; `step()` scrapes once, publishes the event and returns the lines to say.
    It keeps each run's first and last good read (all that served.total needs), not every read."""

    def __init__(self, http: httpx.Client, url: str, kind: str, publish: Callable[[ServerScraped], None]):
        self.http, self.url, self.kind, self.publish = http, url, kind, publish
        self.session_id = ""
        self.last: ServerScraped | None = None  # the latest read, good or failed
        self.last_good: ServerScraped | None = None
        self.runs: list[list[ServerScraped]] = []  # each run's first and latest good read
        self.failed_reads = 0
        self.idle = False  # the last window had nothing in it (said once)
        self.gone = False  # a read since the last good one found no server: the next good one is a restart

    def read(self) -> ServerScraped:
        return scrape(self.http, self.url, self.kind, self.session_id)

    def step(self, now: ServerScraped | None = None) -> list[str]:
        """Take one read (or `now`, a read already taken), publish it, and say what it shows."""
        now = msgspec.structs.replace(now or self.read(), session_id=self.session_id)  # `now` may predate the session
        self.publish(now)
        said = [line for line in (lines.state_line(self.last, self.last_good, now, self.gone),) if line]
        if now.error or now.drafts is None:
            self.failed_reads += 1
            self.gone = self.gone or served.absent(now)
        else:
            said += self._window(now)
            if self.runs and not served.restarted(self.runs[-1][-1], now, self.gone):
                self.runs[-1][1:] = [now]  # the run's latest read replaces the one before it
            else:
                self.runs.append([now])  # a run begins: the first read, or the first after a restart
            self.last_good, self.gone = now, False
        self.last = now
        return said

    def _window(self, now: ServerScraped) -> list[str]:
        # across a blip too, but not across a server that was gone (it started again)
        w = served.window(self.last_good, now) if self.last_good is not None and not self.gone else None
        if w is None:
            return []
        gauges = (now.running, now.waiting) != (self.last_good.running, self.last_good.waiting)
        if w.drafts or w.generation_tokens or gauges:
            self.idle = False
            return [lines.window_line(w, now)]
        if not self.idle:
            self.idle = True
            return [lines.idle_line(w)]
        return []


def poll(
    watcher: Watcher,
    say: Callable[[str], None],
    interval_s: float,
    duration_s: float | None,
    stop: threading.Event,
    first: ServerScraped | None = None,
) -> None:
    """Step every `interval_s` (on a fixed schedule: a slow read does not push the next ones back) until
    `stop` is set or `duration_s` has passed; the last read is taken at the duration's end."""
    start = time.monotonic()
    end = start + (math.inf if duration_s is None else duration_s)
    for taken in itertools.count(1):
        for line in watcher.step(first if taken == 1 else None):
            say(line)
        if stop.is_set() or time.monotonic() >= end:
            return
        if stop.wait(max(0.0, min(start + taken * interval_s, end) - time.monotonic())):
            return
