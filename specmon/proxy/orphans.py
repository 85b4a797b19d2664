"""httpcore 1.0 leaves a connection in its pool when a request is cancelled after the pool gave it a
connection and before the connection took the request (encode/httpcore#1093 and #1099, open; httpx2's
fix covers only the shape with no socket yet). The orphan is never handed out again: it holds a pool
slot, and where its socket was open, a descriptor, for good. The proxy's client keeps no idle
connection (proxy.server), so every pooled connection that no request in the pool holds is such an
orphan: reclaim() closes it and takes it out."""

from __future__ import annotations

import anyio
import httpx


async def reclaim(client: httpx.AsyncClient) -> int:
    """Close and drop every connection of `client`'s pool that no request holds; how many there were.
    Does nothing where httpcore's pool is not shaped as 1.0's is (a later release may have the fix)."""
    pool = getattr(getattr(client, "_transport", None), "_pool", None)
    connections, requests = getattr(pool, "_connections", None), getattr(pool, "_requests", None)
    if not isinstance(connections, list) or not isinstance(requests, list):
        return 0
    held = {getattr(r, "connection", None) for r in requests}
    orphans = [c for c in connections if c not in held]
    for connection in orphans:  # removed before any await: no request can be given one meanwhile
        connections.remove(connection)
    with anyio.CancelScope(shield=True):  # runs as its request is being cancelled
        for connection in orphans:
            await connection.aclose()
    return len(orphans)
