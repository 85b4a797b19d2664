"""Reading a file a user wrote (profile, prompts): UTF-8 with or without a byte-order mark, and
one clear line naming the file and line when it cannot be read."""

from __future__ import annotations

from pathlib import Path

from specmon.errors import SpecmonError


def read_user_text(path: Path, what: str) -> str:
    """The text of `path`; `what` names it in errors ("profile", "prompts file")."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SpecmonError(f"{what} {path}: cannot read it ({exc.strerror})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SpecmonError(f"{what} {path}, line {line}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
