"""`specmon policy set FILE KEY VALUE`: edit through tomlkit, validate, replace atomically.

Comments and layout survive; an edit that would make the policy invalid is refused and the
file is left exactly as it was."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import tomlkit
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import AoT

from specmon.errors import SpecmonError
from specmon.policy.schema import parse_policy

_STEP = re.compile(r"([A-Za-z0-9_\-]+)(?:\[(\d+)\])?")


def set_value(path: Path, key: str, value: str) -> str:
    """Set KEY (e.g. policy.min_gain, classes.rewrite.speculate, classes[1].draft_len) to VALUE,
    a TOML value ("off" needs its quotes only if it could be read as something else)."""
    text = _read(path)
    doc = tomlkit.parse(text)
    parent, last = _walk(doc, key, path)
    parent[last] = _parse_value(value)
    new_text = tomlkit.dumps(doc)
    parse_policy(new_text, str(path))  # raises PolicyError: the file is not touched
    replace_atomically(path, new_text)
    return new_text


def _read(path: Path) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise SpecmonError(f"policy {path}: cannot read it ({exc.strerror})") from None


def _walk(doc, key: str, path: Path):
    """The container that holds KEY's last part; `classes.NAME` picks a class by its name."""
    steps = key.split(".")
    node, i = doc, 0
    while i < len(steps) - 1:
        match = _STEP.fullmatch(steps[i])
        if not match or match.group(1) not in node:
            raise SpecmonError(f"policy {path}: no {'.'.join(steps[:i + 1])!r} in the file")
        node = node[match.group(1)]
        if match.group(2) is not None:
            node = node[int(match.group(2))]
        elif isinstance(node, (list, AoT)):
            i += 1
            node = _class_by_name(node, steps[i], key, path)
        i += 1
    return node, steps[-1]


def _class_by_name(classes, name: str, key: str, path: Path):
    for entry in classes:
        if entry.get("name") == name:
            return entry
    raise SpecmonError(f"policy {path}: no class named {name!r} (in {key!r})")


def _parse_value(value: str):
    try:
        return tomlkit.parse(f"v = {value}")["v"]
    except TOMLKitError:
        return tomlkit.string(value)  # a bare word such as off or enforce


def replace_atomically(path: Path, text: str) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, os.stat(path).st_mode & 0o777 if path.exists() else 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
