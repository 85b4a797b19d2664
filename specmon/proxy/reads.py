"""The proxy's reads of its upstream's /metrics while it serves: each one a ServerScraped event,
published from the serving loop like the requests. Reads that changed nothing are folded (watch.fold).
An upstream with no /metrics (TabbyAPI has none; llama-server without --metrics) is said once, plainly,
and asked again only every NO_METRICS_RETRY_S: its replies are what the proxy measures."""

from __future__ import annotations

import asyncio
import time
from typing import Callable

import httpx
import msgspec

from specmon.console import print_error
from specmon.events.schema import ServerScraped
from specmon.watch.fold import ReadFold
from specmon.metrics.served import NO_METRICS
from specmon.metrics.unreported import Silence
from specmon.watch.scrape import no_page
from specmon.watch.scrape import client as scrape_client
from specmon.watch.scrape import scrape

# a llama-server restarted with --metrics (or another server on that port) is read within minutes, and
# one GET every five minutes costs an upstream nothing: rarely, rather than never
NO_METRICS_RETRY_S = 300.0
OWNERS = {"tabbyAPI": "tabbyapi", "vllm": "vllm", "llamacpp": "llama-server"}  # /v1/models' owned_by
NO_METRICS_HOW = {
    "llama-server": "start llama-server with --metrics for its counters too",
    "tabbyapi": "TabbyAPI has none",
}


def family_of(reply: httpx.Response) -> str:
    """The server family a reply to /health or /v1/models names: llama-server by its `server` header,
    TabbyAPI by its /health body ({"status", "issues"}), any by its models' owned_by; "" where none."""
    if any(name.startswith("llama.cpp") for name in reply.headers.get_list("server")):
        return "llama-server"
    try:
        body = reply.json()
    except ValueError:
        return ""
    if not isinstance(body, dict):
        return ""
    if isinstance(body.get("issues"), list) and "status" in body:  # TabbyAPI's HealthCheckResponse
        return "tabbyapi"
    models = body.get("data") if isinstance(body.get("data"), list) else []
    owners = [
        OWNERS.get(m.get("owned_by")) for m in models if isinstance(m, dict) and isinstance(m.get("owned_by"), str)
    ]
    return next((family for family in owners if family), "")


def family_at(http: httpx.Client, url: str, paths: tuple[str, ...] = ("/health", "/v1/models")) -> str:
    """The family the first of `paths` to name one names; "" where none does (or none answers)."""
    for path in paths:
        try:
            family = family_of(http.get(f"{url}{path}"))
        except httpx.HTTPError:
            continue
        if family:
            return family
    return ""


class UpstreamReads:
    """Reads the first upstream every `options.scrape_s`; keeps the last read that found the counters (a failed
    read says nothing of drafting) and tells each to `told`, the session's fold for its headless line."""

    def __init__(self, session_id: str, publish: Callable, options, told: Silence):
        self.session_id, self.publish, self.options, self.told = session_id, publish, options, told
        self.url = options.upstreams[0]
        self.family = ""  # the upstream's, asked of it where /metrics is missing
        self.last_counted: ServerScraped | None = None
        self.fold = ReadFold()
        self.no_metrics = False  # the upstream had no /metrics page when first read, and still has none
        self.read_any = False

    async def run(self) -> None:
        key = self.options.upstream_key
        with scrape_client(key.decode() if key else None) as http:
            try:
                while True:
                    read = await self._read(http)
                    if no_page(read) and not self.read_any:
                        self.family = await asyncio.to_thread(family_at, http, self.url)
                    self.take(read)
                    await asyncio.sleep(NO_METRICS_RETRY_S if self.no_metrics else self.options.scrape_s)
            finally:  # the session outlives the reads: its log's totals span to the last one
                for read in self.fold.flush():
                    self.publish(read)

    async def _read(self, http) -> ServerScraped:
        try:
            return await asyncio.to_thread(scrape, http, self.url, "auto", self.session_id)
        except Exception as exc:  # an unforeseen page must not end the reads for the rest of the session
            return ServerScraped(session_id=self.session_id, t=time.time(), url=self.url, kind="", error=repr(exc))

    def take(self, read: ServerScraped) -> None:
        """Publish the read where it changed something (ReadFold). No /metrics page at the first read is said
        once, as the read's error (the view and the log show it), and the reads slow until a page is found."""
        first, self.read_any = not self.read_any, True
        # a page that was there and went is a failed read like any other
        self.no_metrics = no_page(read) and (first or self.no_metrics)
        if self.no_metrics:
            how = NO_METRICS_HOW.get(self.family, "HTTP 404")  # a fact, with what to do only where a flag helps
            read = msgspec.structs.replace(
                read, error=f"{self.url} {NO_METRICS} ({how}): the figures come from its replies only"
            )
            if first and self.options.line is not None:  # under the view, the read's line is shown there
                print_error(read.error)
        for passed in self.fold.take(read) if first or not self.no_metrics else []:  # said once, not again
            self.publish(passed)
        if read.drafts is not None:
            self.last_counted = read
        self.told.read(read)  # the headless line's notice says whether the upstream drafts
