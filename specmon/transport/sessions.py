"""Which sessions `specmon attach` can show: the live ones (a socket that answers, in this user's
runtime directory) with what their logs say, and the newest log when none is alive."""

from __future__ import annotations

import os
import socket
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from specmon.events.log import LogDamaged, read_log
from specmon.events.schema import RoundVerified, SessionFinished, SessionStarted
from specmon.metrics.format import clock, count
from specmon.transport.serve import runtime_dir


@dataclass(frozen=True)
class SessionInfo:
    """One session as a line of the list: where to attach, and what it is."""

    socket: Path | None
    log: Path | None
    session_id: str
    profile: str = "?"
    host: str = "?"
    started: float | None = None
    rounds: int = 0
    ended: float | None = None  # when its SessionFinished was written; None while it runs (or if killed)

    def line(self) -> str:
        """Within 80 columns as a numbered item (a session id holds its start: YYYYMMDD-HHMMSS-…)."""
        return f"{self.session_id} {self.profile}@{self.host} from {clock(self.started)}, {count(self.rounds, 'round')}"


def live_sessions() -> list[SessionInfo]:
    """Sessions whose socket answers, newest first; sockets left by killed sessions are removed."""
    found = []
    for path in sorted(runtime_dir().glob("*.sock"), key=_mtime, reverse=True):
        state = _probe(path)
        if state == "dead":
            path.unlink(missing_ok=True)  # nobody listens: its session was killed before it could clean up
            path.with_suffix(".log").unlink(missing_ok=True)
        elif state == "live":
            link = path.with_suffix(".log")
            found.append(describe(Path(os.readlink(link)) if link.is_symlink() else None, path))
    return found


def describe(log: Path | None, sock: Path | None = None) -> SessionInfo:
    """What a session's log says about it: id, profile, host, start, rounds so far, end."""
    fields: dict = {"session_id": (sock or log or Path("?")).stem, "rounds": 0}  # the file's name until read
    with suppress(LogDamaged, OSError):  # a live log may end mid-frame, a vanished one reads empty: list what was read
        for ev in read_log(log) if log is not None else ():
            if isinstance(ev, SessionStarted):
                fields.update(
                    session_id=ev.session_id, profile=ev.profile_name, started=ev.t, host=ev.host.get("hostname", "?")
                )
            elif isinstance(ev, RoundVerified):
                fields["rounds"] += 1
            elif isinstance(ev, SessionFinished):
                fields["ended"] = ev.t
    return SessionInfo(sock, log, **fields)


def newest_log(logs_dir: Path) -> Path | None:
    return max(logs_dir.glob("*.specmon"), key=_mtime, default=None) if logs_dir.is_dir() else None


def _probe(path: Path) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
            return "live"
        except ConnectionRefusedError:
            return "dead"
        except OSError:
            return "unknown"


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
