"""/proc files read every round: through a kept descriptor, one pread where open/read/close cost
~0.1 ms between forward passes (measured live)."""

from __future__ import annotations

import contextlib
import os

# path -> (pid, descriptor): /proc/self resolves at open, so a forked child opens its own
_kept: dict[str, tuple[int, int]] = {}


def kept_pread(path: str, size: int) -> bytes | None:
    """The first `size` bytes of `path`, or None if it cannot be read (the descriptor is dropped)."""
    kept = _kept.get(path)
    try:
        if kept is None or kept[0] != os.getpid():
            forget(path)  # in a forked child: the parent's, inherited
            kept = _kept[path] = (os.getpid(), os.open(path, os.O_RDONLY | os.O_CLOEXEC))
        return os.pread(kept[1], size, 0)
    except OSError:
        forget(path)
        return None


def forget(path: str) -> None:
    kept = _kept.pop(path, None)
    if kept is not None:
        with contextlib.suppress(OSError):
            os.close(kept[1])
