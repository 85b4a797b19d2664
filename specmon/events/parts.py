"""A rotated log's parts: when a log rotates (Rotation), what its finished parts are named, and what
`log info` says of the parts around the one it reads. The writing and following are in events.log."""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path

from specmon.errors import SpecmonError
from specmon.events.schema import LogRotated, SessionStarted


@dataclass(frozen=True)
class Rotation:
    """When a log goes on in a new file: past `max_bytes` (None: only when asked, LogWriter.rotate), keeping
    the newest `keep` finished parts (None: every one)."""

    max_bytes: int | None = None
    keep: int | None = None


def refuse_taken_parts(live: Path) -> None:
    """A rotating log must not take over the parts of another: no part's name may be taken (an old log's
    first parts may have been removed by --log-keep, its later ones not)."""
    for taken in sorted(live.parent.glob(f"{glob.escape(live.stem)}.*{live.suffix}")):
        if taken.stem.removeprefix(live.stem + ".").isdigit():
            raise SpecmonError(f"{taken} exists (a part of another log); pick a new --log or remove it")


def part_path(live: Path, part: int) -> Path:
    """The name a finished part takes: logs/S.specmon's first is logs/S.1.specmon."""
    return live.with_name(f"{live.stem}.{part}{live.suffix}")


def link_part(live: Path, done: Path) -> bool:
    """Give the finished part its name beside the live one; False where hard links are not supported.
    A name already taken is refused (an OSError, as a full disk is), never overwritten."""
    if done.exists():
        raise FileExistsError(17, "a finished part's name is taken", str(done))
    try:
        os.link(live, done)
    except FileExistsError:
        raise
    except OSError:
        return False
    return True


def parts_said(path: Path, header: SessionStarted | None, rotated: LogRotated | None) -> list[tuple[str, str]]:
    """log info's lines on the parts around `path`: the earlier ones still on disk, and where it goes on."""
    said = []
    part = header.part if header is not None else 1
    if part > 1:
        tail = f".{part}{path.suffix}"  # the live log it belongs to: logs/S.3.specmon (part 3) is logs/S.specmon's
        live = path.with_name(path.name[: -len(tail)] + path.suffix) if path.name.endswith(tail) else path
        kept = [earlier for earlier in (part_path(live, n) for n in range(1, part)) if earlier.exists()]
        names = ", ".join(p.name for p in kept) or "none"
        gone = f" ({part - 1 - len(kept)} removed)" if len(kept) < part - 1 else ""
        said.append(("  part             ", f"{part} of a rotated log; earlier parts here: {names}{gone}"))
    if rotated is not None:
        live = path.parent / rotated.next_name
        went_on = f"{live.name} while it is live, then {part_path(live, rotated.part + 1).name}"
        said.append(("  continued        ", f"in part {rotated.part + 1}: {went_on}"))
    return said
