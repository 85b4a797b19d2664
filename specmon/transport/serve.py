"""Serve a running session's events to `specmon attach` over a Unix socket (and TCP on loopback).

Each client gets the log's events from its start (the history; a rotated log's from its live
part's) and then follows it live, so every client sees exactly the events in the log. A client only reads the file: a slow or vanished
one lags or ends alone and never touches the decode loop. TCP clients must first send the
session's token; one that does not is closed with nothing sent. The token is written to a 0600
file beside the socket (its path is printed, the token never is) and removed with it.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import socket
import threading
from contextlib import suppress
from pathlib import Path

from specmon.errors import SpecmonError
from specmon.events.frames import FrameEncoder
from specmon.events.log import follow_batches
from specmon.events.schema import encode
from specmon.transport.channel import LogSink

TOKEN_WAIT_S = 5.0


def runtime_dir() -> Path:
    """A per-user directory only its owner can enter: $XDG_RUNTIME_DIR/specmon or /tmp/specmon-UID."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    path = Path(base) / "specmon" if base else Path("/tmp") / f"specmon-{os.getuid()}"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_uid != os.getuid():
        raise SpecmonError(f"{path} belongs to another user; set XDG_RUNTIME_DIR to a directory of yours")
    os.chmod(path, 0o700)
    return path


def split_address(text: str, what: str, lowest_port: int = 0) -> tuple[str, int]:
    """'HOST:PORT' or '[::1]:PORT' → (host, port), the port checked; one SpecmonError line otherwise."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not lowest_port <= int(port) <= 65535:
        raise SpecmonError(f"{what} {text}: expected HOST:PORT with a port {lowest_port}..65535, e.g. 127.0.0.1:7777")
    return host, int(port)


def addresses(host: str, what: str) -> list[str]:
    """`host`'s IP addresses, IPv4 first (what tunnels and clients expect), or one line naming `what`."""
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise SpecmonError(f"{what}: cannot resolve {host!r} ({getattr(exc, 'strerror', None) or exc})") from None
    ips = [info[4][0].split("%")[0] for info in found if info[0] in (socket.AF_INET, socket.AF_INET6)]
    return sorted(dict.fromkeys(ips), key=lambda address: ":" in address)


def parse_listen(text: str) -> tuple[str, int]:
    """'127.0.0.1:PORT' or 'localhost:PORT' → (loopback address, port). A name is resolved, and
    refused unless every address it has is loopback (a name that also reaches the network is not)."""
    host, port = split_address(text, "--listen")
    found = addresses(host, f"--listen {text}")
    if not found or not all(ipaddress.ip_address(a).is_loopback for a in found):
        raise SpecmonError(f"--listen {text}: only loopback addresses are served (use SSH to reach it)")
    return found[0], port


class EventServer:
    def __init__(self, sink: LogSink, unix_path: Path, tcp: tuple[str, int] | None = None):
        self.sink, self.unix_path = sink, unix_path
        self.token = secrets.token_hex(16) if tcp else None  # in memory and in token_path, never printed
        self.token_path: Path | None = None
        self.log_link: Path | None = None
        self.tcp_address = None
        self._listeners: list[socket.socket] = []
        self._stopping = threading.Event()
        try:
            self._listeners.append(_unix_listener(unix_path))
            # a link beside the socket to the session's log, so `attach` can list sessions with their history
            self.log_link = unix_path.with_suffix(".log")
            self.log_link.unlink(missing_ok=True)
            os.symlink(Path(sink.path).resolve(), self.log_link)
            if tcp is not None:
                self._listeners.append(self._tcp_listener(tcp))
                self.token_path = write_token(unix_path.with_suffix(".token"), self.token)
        except BaseException:
            self.close()  # no listener or socket file outlives a failed start
            raise
        for listener in self._listeners:
            threading.Thread(target=self._accept, args=(listener,), daemon=True, name="specmon-accept").start()

    def _tcp_listener(self, tcp: tuple[str, int]) -> socket.socket:
        try:  # SO_REUSEADDR, bound and listening
            listener = socket.create_server(tcp, family=socket.AF_INET6 if ":" in tcp[0] else socket.AF_INET)
        except OSError as exc:  # create_server wraps strerror in "while attempting to bind ...": say it once
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise SpecmonError(f"cannot listen on {tcp[0]}:{tcp[1]}: {reason}") from None
        self.tcp_address = listener.getsockname()[:2]
        return listener

    def _accept(self, listener: socket.socket) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True, name="specmon-client").start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, suppress(OSError):  # OSError: the client went away; the run goes on
            if conn.family == socket.AF_UNIX or self._token_ok(conn):  # TCP clients send the token first
                self._stream(conn)

    def _token_ok(self, conn: socket.socket) -> bool:
        conn.settimeout(TOKEN_WAIT_S)
        with conn.makefile("rb") as lines:
            line = lines.readline(256)  # to its newline, the end of the connection or 256 bytes
        conn.settimeout(None)
        return line.endswith(b"\n") and hmac.compare_digest(line.strip(), (self.token or "").encode())

    def _stream(self, conn: socket.socket) -> None:
        """The live part's events, re-framed as one log of the client's own: a rotation is no seam to it."""
        frames = FrameEncoder()
        conn.sendall(frames.preamble())
        sent = 0
        ended = lambda: self.sink.closed or self._stopping.is_set()  # noqa: E731 - every event is in the log
        with suppress(SpecmonError):  # the log failed or went away: the client has every whole event it held
            for batch in follow_batches(self.sink.path, 0.05, None, ended):
                conn.sendall(b"".join(frames.frame(encode(ev), sent + i) for i, ev in enumerate(batch)))
                sent += len(batch)

    def close(self) -> None:
        self._stopping.set()
        for listener in self._listeners:
            listener.close()
        for path in (self.unix_path, self.token_path, self.log_link):
            if path is not None:
                path.unlink(missing_ok=True)


def write_token(path: Path, token: str) -> Path:
    """The token in a file only its owner can read: created 0600, never through a planted link."""
    path.unlink(missing_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise SpecmonError(f"cannot write the token file {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w") as fh:
        os.fchmod(fh.fileno(), 0o600)  # whatever the umask
        fh.write(token + "\n")
    return path


def _unix_listener(path: Path) -> socket.socket:
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # the socket is born 0600: no window where others could connect
    try:
        listener.bind(str(path))
    except OSError as exc:
        listener.close()
        raise SpecmonError(
            f"cannot serve on {path}: {exc.strerror or exc}; set XDG_RUNTIME_DIR to a short directory of yours"
        ) from None
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    listener.listen()
    return listener
