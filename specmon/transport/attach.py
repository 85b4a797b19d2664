"""The client side of `specmon attach`: history then live events, from a socket or a log file."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Iterator

from specmon.errors import SpecmonError
from specmon.events.frames import FrameDecoder
from specmon.events.log import follow_log
from specmon.events.schema import AnyEvent, SessionFinished
from specmon.transport.serve import split_address

TOKEN_ENV = "SPECMON_TOKEN"
CONNECT_TIMEOUT_S = 10.0


def read_token(token_file: Path | None) -> str | None:
    """The TCP token: from `--token-file` (the file `specmon run --listen` wrote), else $SPECMON_TOKEN."""
    if token_file is None:
        return os.environ.get(TOKEN_ENV, "").strip() or None
    try:
        token = token_file.read_text(encoding="ascii").strip()
    except OSError as exc:
        raise SpecmonError(f"--token-file {token_file}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise SpecmonError(f"--token-file {token_file}: not a token file (expected one line of hex)") from None
    if not token:
        raise SpecmonError(f"--token-file {token_file}: the file is empty")
    return token


def attach_events(target: str, token: str | None = None) -> Iterator[AnyEvent]:
    """Events of a session: from a Unix socket path, HOST:PORT (with token), or a .specmon log file."""
    if target.endswith(".specmon"):
        yield from follow_log(Path(target))
        return
    tcp = None
    if ":" in target and not Path(target).exists():
        try:
            tcp = split_address(target, "attach", lowest_port=1)
        except SpecmonError:
            raise SpecmonError(
                f"attach {target}: no such socket or log, and not HOST:PORT with a port 1..65535"
            ) from None
        if not token:
            raise SpecmonError(
                f"attaching over TCP needs the session's token: --token-file FILE (the path "
                f"`specmon run --listen` printed) or {TOKEN_ENV}"
            )
    sock = _connect(target, tcp)
    if tcp:
        sock.sendall(token.encode() + b"\n")
    decoder = FrameDecoder(target)
    with sock:
        while data := sock.recv(1 << 16):
            for event in decoder.feed(data):
                yield event
                if isinstance(event, SessionFinished):
                    return
    if decoder.offset == 0 and decoder.pending == 0:
        raise SpecmonError(f"{target} closed the connection without sending anything (wrong token?)")
    decoder.finish()


def _connect(target: str, tcp: tuple[str, int] | None) -> socket.socket:
    """The session's Unix socket at `target`, or `tcp`'s HOST:PORT; one line saying why not."""
    sock = None
    try:
        if tcp is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(target)
        else:
            sock = socket.create_connection(tcp, timeout=CONNECT_TIMEOUT_S)
            sock.settimeout(None)  # a quiet session is not an error: wait for its next event
    except (OSError, UnicodeError) as exc:
        if sock is not None:
            sock.close()
        where = target if tcp is None else f"{tcp[0]}:{tcp[1]}"
        raise SpecmonError(
            f"cannot attach to {where}: {getattr(exc, 'strerror', None) or exc}; is the session still running?"
        ) from None
    return sock
