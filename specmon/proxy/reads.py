"""The proxy's reads of its upstream's /metrics while it serves: each one a ServerScraped event,
published from the serving loop like the requests."""

from __future__ import annotations

import asyncio
import time
from typing import Callable

from specmon.events.schema import ServerScraped
from specmon.proxy.tables import LIVE_LINES
from specmon.watch.scrape import client as scrape_client
from specmon.watch.scrape import scrape


class UpstreamReads:
    """Reads `url`'s /metrics every `every_s` and publishes each read; keeps the last read that found
    the counters (does it draft at all: a failed read says nothing)."""

    def __init__(
        self, session_id: str, url: str, publish: Callable, every_s: float, key: bytes | None, lines: Callable[[], bool]
    ):
        self.session_id, self.url, self.publish, self.every_s = session_id, url, publish, every_s
        self.key, self.lines = key, lines  # lines(): headless, whose notices read the counters too
        self.last_counted: ServerScraped | None = None

    async def run(self) -> None:
        with scrape_client(self.key.decode() if self.key else None) as http:
            while True:
                self.take(await self._read(http))
                await asyncio.sleep(self.every_s)

    async def _read(self, http) -> ServerScraped:
        try:
            return await asyncio.to_thread(scrape, http, self.url, "auto", self.session_id)
        except Exception as exc:  # an unforeseen page must not end the reads for the rest of the session
            return ServerScraped(session_id=self.session_id, t=time.time(), url=self.url, kind="", error=repr(exc))

    def take(self, read: ServerScraped) -> None:
        self.publish(read)
        if read.drafts is not None:
            self.last_counted = read
        if self.lines():
            LIVE_LINES.read(read)  # the headless line's notice says whether the upstream drafts
