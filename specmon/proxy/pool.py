"""The upstreams (the same model behind each, on both sides) and how a request finds one that answers,
as Envoy's upstream clusters do: a request goes to the member of its side with the fewest requests
outstanding; a member that refuses a connection, drops it before a reply, or sends nothing while its
/health is silent too is marked down, left out, and probed (GET /health) every RETRY_S until it
answers. A request whose side has no member up goes to the other side (a failover, said once per
outage); only when no member of either side answers is it a 502.

A request is sent again elsewhere only where the first member gave nothing back: a refused or dropped
connection. One a member took and never answered may still be decoding it, so that request ends in a 504."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Awaitable, Callable, TypeVar

import anyio
import httpx

from specmon.proxy.orphans import reclaim
from specmon.proxy.reads import family_of
from specmon.proxy.relay import reason
from specmon.server.errors import ApiError

T = TypeVar("T")
RETRY_S = 5.0  # a down member's /health is asked this often
PROBE_TIMEOUT_S = 5.0  # a /health slower than this is no answer
BROKEN_IN_A_ROW = 5  # Envoy's consecutive_5xx default
NOT_ANSWERED = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError)


@dataclass(eq=False)
class Upstream:
    url: str  # base URL, no trailing slash
    side: str
    outstanding: int = 0
    sent: int = 0  # requests sent, to spread ties evenly
    down_since: float = 0.0  # monotonic clock; 0.0: up
    family: str = ""  # the reply shape last read from it (proxy.evidence), "" until one is
    broken: int = 0  # its replies in a row that broke off mid-way

    @property
    def down(self) -> bool:
        return self.down_since > 0.0


class Pool:
    def __init__(self, side: str, urls: list[str], say: Callable[[str], None], client: httpx.AsyncClient | None = None):
        self.side, self.say, self.client = side, say, client  # client: the probes' (None: no probes)
        self.members = [Upstream(url, side) for url in urls]
        self.failing_over = False  # said once per outage of the whole side
        self._probes: dict[str, asyncio.Task] = {}

    def up(self) -> list[Upstream]:
        """Members up, fewest outstanding first."""
        return sorted((u for u in self.members if not u.down), key=_load)

    def failed(self, member: Upstream, why: str) -> None:
        """It did not answer: left out and probed until it does; said when it first goes."""
        if member.down:
            return
        member.down_since = time.monotonic()
        self.say(
            f"upstream {member.url} ({self.side}) is down ({why}): left out, its /health asked every {RETRY_S:.0f} s"
        )
        if self.client is not None and member.url not in self._probes:
            self._probes[member.url] = asyncio.get_running_loop().create_task(self._probe(member))

    def suspect(self, member: Upstream, why: str) -> None:
        """A deadline passed: down only where its /health is silent too (a queue or a long prefill is not)."""
        if self.client is not None and not member.down:
            asyncio.get_running_loop().create_task(self._check(member, why))

    def missed(self, member: Upstream, exc: httpx.TransportError) -> None:
        """No reply came: down where it gave nothing back or is Hung; past another deadline, suspected."""
        if isinstance(exc, (Hung, *NOT_ANSWERED)):
            self.failed(member, reason(exc))
        elif isinstance(exc, httpx.TimeoutException):
            self.suspect(member, reason(exc))

    async def _check(self, member: Upstream, why: str) -> None:
        if await _health(self.client, member) is None:
            self.failed(member, f"{why}, and its /health is silent")

    def answered(self, member: Upstream) -> None:
        if member.down:
            self.say(
                f"upstream {member.url} ({self.side}) answers again after {time.monotonic() - member.down_since:.0f} s"
            )
            member.down_since = 0.0
        if self.failing_over:
            self.failing_over = False
            self.say(f"the {self.side} side answers again: its classes go back to it")

    def replied(self, member: Upstream, broke: bool) -> None:
        """A reply is over: one that breaks off BROKEN_IN_A_ROW replies is as good as down (Envoy's ejection)."""
        member.broken = member.broken + 1 if broke else 0
        if member.broken >= BROKEN_IN_A_ROW:
            member.broken = 0
            self.failed(member, f"{BROKEN_IN_A_ROW} replies in a row broke off")

    async def _probe(self, member: Upstream) -> None:
        try:
            while member.down:
                await asyncio.sleep(RETRY_S)
                status = await _health(self.client, member)
                if status is not None and status < 500:  # 503: still loading its model; 404: up, without /health
                    self.answered(member)
        finally:
            self._probes.pop(member.url, None)

    async def identify(self) -> None:
        """Each member's family from its /health or /v1/models (proxy.usage); else from its first reply."""
        for member in self.members:
            for path in ("/health", "/v1/models"):
                try:
                    reply = await self.client.get(member.url + path, timeout=PROBE_TIMEOUT_S)
                except httpx.TransportError:
                    break
                if family := family_of(reply):
                    member.family = member.family or family
                    break

    def close(self) -> None:
        for task in list(self._probes.values()):
            task.cancel()


def candidates(pools: Sequence[Pool], any_side: bool = False) -> list[Upstream]:
    """In the order a request tries them: its side's members up, then the other side's (`any_side`, a path such
    as /health: all up, least busy first), then those down (one may be back before its probe says so)."""
    up = [u for pool in pools for u in pool.up()]
    if any_side:
        up.sort(key=_load)
    return up + [u for pool in pools for u in pool.members if u.down]


async def send(
    client: httpx.AsyncClient,
    pools: Sequence[Pool],
    request: Callable[[Upstream], httpx.Request],
    any_side: bool = False,
    retry_timeouts: bool = False,
    watch_s: float | None = None,
) -> tuple[Upstream, httpx.Response]:
    """The reply head of the first member that answers (in `candidates` order), its `outstanding` counted
    (the caller gives it back); a 502 where none answers, a 504 where the one that took the request sent
    nothing in time (`retry_timeouts`: an idempotent request asks the next member instead)."""
    by_side = {pool.side: pool for pool in pools}
    why, where = "no upstream", pools[0].members[0].url
    for member in candidates(pools, any_side):
        member.outstanding += 1
        member.sent += 1
        try:
            reply = await watched(client, member, client.send(request(member), stream=True), watch_s)
        except BaseException as exc:
            member.outstanding -= 1  # the slot is free again
            if not isinstance(exc, httpx.TransportError):  # cancelled (the client left)
                await reclaim(client)  # and so is the upstream connection httpcore may have left behind
                raise
            by_side[member.side].missed(member, exc)
            why, where = reason(exc), member.url
            if isinstance(exc, NOT_ANSWERED) or (retry_timeouts and isinstance(exc, httpx.TimeoutException)):
                continue
            raise no_reply(member.url, exc) from None
        by_side[member.side].answered(member)
        return member, reply
    members = sum(len(pool.members) for pool in pools)
    raise unreachable(where if members == 1 else "every upstream", why)


class Hung(httpx.ReadTimeout):
    """Nothing came from a member within its watch, and its /health did not answer either."""


async def watched(client: httpx.AsyncClient, member: Upstream, work: Awaitable[T], watch_s: float | None) -> T:
    """`work` (a reply's head, or its first bytes), waited for within its own deadline while the member shows
    it is alive: every `watch_s` its /health is asked, and where that is silent too Hung is raised (a stopped
    process), not at the deadline. A result that came too late to be handed over is closed."""
    task, handed = asyncio.ensure_future(work), False
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=watch_s)
            if not done:
                alive = await _health(client, member) is not None
                if not task.done() and not alive:
                    raise Hung("neither its reply nor its /health came", request=None)
            if task.done():
                handed = True
                return task.result()
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
            await reclaim(client)  # a send cancelled here can leave httpcore's orphan too (proxy.orphans)
        elif not handed and not task.cancelled() and task.exception() is None:
            with anyio.CancelScope(shield=True):
                await task.result().aclose()


async def _health(client: httpx.AsyncClient, member: Upstream) -> int | None:
    """Its /health's status; None where it does not answer (llama-server, vLLM and TabbyAPI do while decoding)."""
    try:
        return (await client.get(member.url + "/health", timeout=PROBE_TIMEOUT_S)).status_code
    except httpx.TransportError:
        return None


def failed_over(routed: Pool, member: Upstream) -> bool:
    """Whether a request routed to `routed` was answered by the other side; said once per outage."""
    if member.side == routed.side:
        return False
    if not routed.failing_over and not routed.up():  # not a request that failed over before the side came back
        routed.failing_over = True
        routed.say(f"no {routed.side} upstream answers: its requests go to the {member.side} side until one does")
    return True


def _load(member: Upstream) -> tuple[int, int]:
    return member.outstanding, member.sent


def no_reply(where: str, exc: httpx.TransportError) -> ApiError:
    """A 504 where a deadline passed, else a 502."""
    if isinstance(exc, httpx.TimeoutException):
        why = f"the upstream {where} sent nothing within the proxy's idle timeout (--idle-timeout)"
        return ApiError(504, why, type="server_error", code="upstream_timeout")
    return unreachable(where, reason(exc))


def unreachable(where: str, why: str) -> ApiError:
    why = f"the upstream {where} did not answer ({why})"
    return ApiError(502, why, type="server_error", code="upstream_unreachable")
