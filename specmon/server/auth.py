"""The API key's two rules outside the request path (app.authorize checks each request): the key is
read from a file only its owner can read, and an address others can reach is served only with one.
`serve`, `proxy` and `watch` (a key it sends) read keys here."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

from specmon.errors import SpecmonError
from specmon.transport.serve import addresses


def read_api_key(path: Path, flag: str = "--api-key-file") -> bytes:
    """The key from a file only its owner can read (as ssh insists for private keys); never printed."""
    try:
        mode = path.stat().st_mode
        key = path.read_bytes().strip()
    except OSError as exc:
        raise SpecmonError(f"{flag} {path}: cannot read it ({exc.strerror})") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SpecmonError(f"{flag} {path}: others can read it; run `chmod 600 {path}`")
    if not key or b"\n" in key or any(b < 0x21 or b > 0x7E for b in key):
        raise SpecmonError(f"{flag} {path}: expected one line of printable ASCII, no spaces")
    return key


def check_host(host: str, has_key: bool) -> None:
    """Loopback by default; any address others can reach needs an API key."""
    found = addresses(host, f"--host {host}")
    if not has_key and not all(ipaddress.ip_address(a).is_loopback for a in found):
        raise SpecmonError(
            f"--host {host} is reachable from other machines: give --api-key-file FILE (clients send "
            "the key as a bearer token), or serve on 127.0.0.1 and use an SSH tunnel"
        )
