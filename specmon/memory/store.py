"""What a session learned, kept for the next one: a small file per key, under the user's state dir.

A key names everything the stored figures depend on (engine, model files, drafter and its settings,
sampling; the host, for the engine's costs; the server pair, for the proxy's routing), so a store
written under another key is never read. Each file is replaced whole and atomically, at the end of
a session and as it goes, so a crash loses at most what came since the last write. A file that
cannot be read, or holds another key or version, is one warning line and is then overwritten."""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Generic, TypeVar

import msgspec

from specmon.console import notice
from specmon.events.schema import Sampling
from specmon.textfile import replace_atomically

VERSION = 1  # a store of another version is not read (its figures may mean something else)
HALF_LIFE_S = 7 * 86400.0  # stored evidence counts half as much a week after it was written
KEEP_EVERY_S = 10.0  # a store is replaced at most this often as a session goes (and once at its end)

T = TypeVar("T")


# host facts a curve does not hang on: how stalls are read, and torch's pad_from, measured at each load,
# which flips between neighbours where padding from either costs the same (2 and 3 on 2 cores)
NOT_KEYED = ("cpu_stall", "pad_from")


def costs_key(engine: dict[str, str], host: dict[str, str]) -> dict[str, str]:
    """An engine's cost curve holds on this host only, as the engine's threads run there."""
    return engine | {f"host.{name}": value for name, value in host.items() if name not in NOT_KEYED}


def accept_key(engine: dict[str, str], sampling: Sampling) -> dict[str, str]:
    """Acceptance depends on how the target samples, not on the host."""
    return engine | {"sampling": f"t={sampling.temperature} p={sampling.top_p} k={sampling.top_k}"}


def state_dir() -> Path:
    """Where stores live: $SPECMON_STATE, else $XDG_STATE_HOME/specmon, else ~/.local/state/specmon."""
    if os.environ.get("SPECMON_STATE"):
        return Path(os.environ["SPECMON_STATE"])
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(Path.home(), ".local", "state")
    return Path(base) / "specmon"


class Entry(msgspec.Struct, Generic[T], kw_only=True):
    """A store's file: its figures (`body`), their key, and the session a decision drawn from them cites."""

    version: int
    kind: str  # "costs" | "accept" | "routes"
    key: dict[str, str]
    session_id: str  # the session that wrote it
    t: float  # when
    body: T


def age_weight(t: float) -> float:
    """What evidence stored at `t` is worth against fresh, by its age: 1 when written, 1/2 a week on."""
    age = max(0.0, time.time() - t)
    return 0.5 ** (age / HALF_LIFE_S)


@dataclass
class Memory:
    """The store as a session uses it: `fresh` reads nothing (what it learns is still kept), `retime`
    times the engine again though a curve is stored."""

    fresh: bool = False
    retime: bool = False
    warn: Callable[[str], None] = notice
    _warned: set = field(default_factory=set)

    def path(self, kind: str, key: dict[str, str]) -> Path:
        digest = hashlib.sha256(msgspec.json.encode([kind, key], order="sorted")).hexdigest()[:20]
        return state_dir() / "memory" / f"{kind}-{digest}.json"

    def warn_once(self, path: Path, why: str) -> None:
        """One warning line a file, whatever is tried with it again (a store written as a session goes)."""
        if path not in self._warned:
            self._warned.add(path)
            self.warn(f"warning: the memory store {path} is not used: {why}")


@dataclass(eq=False)
class Shelf:
    """One key's place in the store: what a component reads at start and replaces as it learns."""

    memory: Memory
    kind: str
    key: dict[str, str]
    kept_at: float = -float("inf")  # monotonic time of the last write: the first learning is kept at once

    def recall(self, body_type: type[T]) -> Entry[T] | None:
        """The stored figures for this key, or None: none kept, `fresh`, or a file that cannot be used
        (one warning line, then it is overwritten by what this session learns)."""
        if self.memory.fresh:
            return None
        path, warn = self.memory.path(self.kind, self.key), self.memory.warn_once
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            return warn(path, f"cannot read it ({exc.strerror})")
        try:
            entry = msgspec.json.decode(data, type=Entry[msgspec.Raw])  # the body read once the key is checked
            if entry.version != VERSION or entry.kind != self.kind or entry.key != self.key:
                return warn(path, "it was written for another version, model or setting")
            return msgspec.structs.replace(entry, body=msgspec.json.decode(entry.body, type=body_type))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return warn(path, f"it is damaged ({str(exc).splitlines()[0][:80]})")

    def due(self, final: bool = False) -> bool:
        """Whether to write now: at most every KEEP_EVERY_S as the session goes, and when it ends (`final`)."""
        return final or time.monotonic() - self.kept_at >= KEEP_EVERY_S

    def keep(self, session_id: str, body: object) -> None:
        """Replace the stored figures for this key; a store that cannot be written is one warning."""
        self.kept_at = time.monotonic()
        path = self.memory.path(self.kind, self.key)
        entry = Entry(version=VERSION, kind=self.kind, key=self.key, session_id=session_id, t=time.time(), body=body)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            replace_atomically(path, msgspec.json.encode(entry).decode())
        except OSError as exc:
            self.memory.warn_once(path, f"cannot write it ({exc.strerror}); this session's learning is not kept")
