"""A side's upstreams (the same model behind each): a request goes to the one with the fewest
requests outstanding; one that refuses a connection is left out, retried after RETRY_S, and said
once when it goes and once when it answers again. Only a failed connect moves a request to the
next upstream: nothing of it reached the first, so sending it again cannot decode it twice."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import httpx

from specmon.proxy.relay import reason
from specmon.server.errors import ApiError

RETRY_S = 5.0  # a down upstream is tried again after this long (by the next request that could use it)
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout)  # the request never reached the upstream


@dataclass
class Upstream:
    url: str  # base URL, no trailing slash
    side: str
    outstanding: int = 0
    sent: int = 0  # requests sent, to spread ties evenly
    down_until: float = 0.0  # monotonic clock; 0.0: up
    down_since: float = 0.0

    @property
    def down(self) -> bool:
        return self.down_since > 0.0


class Pool:
    def __init__(self, side: str, urls: list[str], say: Callable[[str], None] = lambda line: None):
        self.side, self.say = side, say
        self.members = [Upstream(url, side) for url in urls]

    def pick(self, tried: set[str] = frozenset(), now: float | None = None) -> Upstream | None:
        """The member to send to: least outstanding among those up or due a retry; with every
        member down and none due, the one due soonest (a request is never refused unsent)."""
        now = time.monotonic() if now is None else now
        left = [u for u in self.members if u.url not in tried]
        ready = [u for u in left if u.down_until <= now]
        if ready:
            return min(ready, key=lambda u: (u.outstanding, u.sent))
        return min(left, key=lambda u: u.down_until) if left else None

    def failed(self, member: Upstream, why: str) -> None:
        """It refused a connection: left out for RETRY_S; said when it first goes."""
        now = time.monotonic()
        member.down_until = now + RETRY_S
        if not member.down:
            member.down_since = now
            self.say(f"upstream {member.url} ({self.side}) is down ({why}): left out, retried every {RETRY_S:.0f} s")

    def answered(self, member: Upstream) -> None:
        if member.down:
            self.say(
                f"upstream {member.url} ({self.side}) answers again after {time.monotonic() - member.down_since:.0f} s"
            )
        member.down_until = member.down_since = 0.0

    def live(self) -> int:
        return sum(not u.down for u in self.members)


async def send(
    client: httpx.AsyncClient, pool: Pool, method: str, path: str, headers, body: bytes
) -> tuple[Upstream, httpx.Response]:
    """The reply head of the first member that takes the connection; a 502 in the one error shape
    when none does, or when one took it and then failed."""
    tried: set[str] = set()
    why = "no upstream"
    while (member := pool.pick(tried)) is not None:
        tried.add(member.url)
        member.outstanding += 1
        member.sent += 1
        try:
            reply = await client.send(
                client.build_request(method, member.url + path, headers=headers, content=body), stream=True
            )
        except NOT_SENT as exc:
            member.outstanding -= 1
            why = reason(exc)
            pool.failed(member, why)
            continue
        except httpx.TransportError as exc:
            member.outstanding -= 1
            raise _unreachable(member.url, reason(exc)) from None
        except BaseException:  # cancelled (the client left): the slot is free again
            member.outstanding -= 1
            raise
        pool.answered(member)
        return member, reply
    where = pool.members[0].url if len(pool.members) == 1 else f"every {pool.side} upstream"
    raise _unreachable(where, why)


def _unreachable(where: str, why: str) -> ApiError:
    return ApiError(
        502, f"the upstream {where} did not answer ({why})", type="server_error", code="upstream_unreachable"
    )
