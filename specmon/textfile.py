"""Reading a file a user wrote (UTF-8, with or without a BOM, or one line naming file and line); replacing one atomically."""

from __future__ import annotations

import errno
import os
import tempfile
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


def replace_atomically(path: Path, text: str) -> None:
    """Write text (UTF-8) in place of the file at once (a fsynced temporary file renamed over it, the
    directory fsynced so the rename survives a crash); a symlink stays one: its target is replaced."""
    target = Path(os.path.realpath(path))
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(text.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, os.stat(target).st_mode & 0o777 if target.exists() else 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):  # some file systems cannot sync a directory
            raise
    finally:
        os.close(fd)


def check_new_log(path: Path | None) -> None:
    """A --log that exists is refused before the work starts, not after (the writer refuses it too)."""
    if path is not None and Path(path).exists():
        raise SpecmonError(f"{path} exists; pick a new file or remove it")
