"""`specmon policy set FILE KEY VALUE`: edit through tomlkit, validate, replace atomically.

Comments and layout survive, and so do CRLF line endings, a byte-order mark and a symlink (the
edit is written through to its target); an edit that would make the policy invalid is refused
and the file is left exactly as it was."""

from __future__ import annotations

import re
from pathlib import Path

import tomlkit
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import AoT

from specmon.errors import SpecmonError
from specmon.textfile import replace_atomically
from specmon.policy.schema import PolicyError, load_toml, parse_policy, read_policy_text

_STEP = re.compile(r"([A-Za-z0-9_\-]+)(?:\[(\d+)\])?")
_BARE_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")  # off, enforce, goodput: a string without its quotes
_BOM = "\ufeff"


def set_value(path: Path, key: str, value: str) -> str:
    """Set KEY (e.g. policy.min_gain, classes.rewrite.speculate, classes[1].draft_len) to VALUE,
    a TOML value ("off" needs its quotes only if it could be read as something else)."""
    text = read_policy_text(path, keep_newlines=True)
    bom, body = (_BOM, text[1:]) if text.startswith(_BOM) else ("", text)
    load_toml(body, str(path))  # tomllib's verdict and location first, as `policy check` gives them
    try:
        doc = tomlkit.parse(body)
    except (TOMLKitError, ValueError, RecursionError) as exc:
        line, col = getattr(exc, "line", 1) or 1, getattr(exc, "col", 1) or 1
        raise PolicyError(str(path), line, col, f"invalid TOML: {str(exc).rsplit(' at line', 1)[0]}") from None
    parent, last, created = _walk(doc, key, path)
    added = created or last not in parent
    parent[last] = _parse_value(value, path)
    new_text = tomlkit.dumps(doc)
    if "\r\n" in body:  # tomlkit writes a key it adds with "\n": keep the file's own line ending
        new_text = re.sub(r"(?<!\r)\n", "\r\n", new_text)
    try:
        parse_policy(new_text, str(path))  # the file is not touched unless the edit is valid
    except PolicyError as exc:
        if added and "unknown field" in str(exc):  # its line would be one of a file never written
            raise SpecmonError(f"policy {path}: {key!r} is not a key a policy has; the file is unchanged") from None
        raise
    replace_atomically(path, bom + new_text)
    return new_text


def _walk(doc, key: str, path: Path):
    """The table holding KEY's last part, that part, and whether a table was added on the way (inline in a class)."""
    steps = key.split(".")
    node, i, created = doc, 0, False
    while i < len(steps) - 1:
        match = _STEP.fullmatch(steps[i])
        where = ".".join(steps[: i + 1])
        # tomlkit's document, tables and inline tables are all dicts
        if match and isinstance(node, dict) and match.group(2) is None and match.group(1) not in node:
            # a [header] at the top (after the classes, a bare key would join the last one); inline inside
            node[match.group(1)] = tomlkit.table() if node is doc else tomlkit.inline_table()
            created = True  # the schema says whether it may be there
        if not match or not isinstance(node, dict) or match.group(1) not in node:
            raise SpecmonError(f"policy {path}: no {where!r} in the file")
        node = node[match.group(1)]
        if match.group(2) is not None:
            if not isinstance(node, (list, AoT)):
                raise SpecmonError(f"policy {path}: {where!r}: {where.split('[')[0]!r} is not a list")
            if int(match.group(2)) >= len(node):
                raise SpecmonError(f"policy {path}: no {where!r}: the file has {len(node)} (0..{len(node) - 1})")
            node = node[int(match.group(2))]
        elif isinstance(node, (list, AoT)):
            node, used = _class_by_name(node, steps[i + 1 : -1], key, path)
            i += used
        i += 1
    if not isinstance(node, dict) or not steps[-1]:
        raise SpecmonError(
            f"policy {path}: {key!r} does not name a key in a table "
            f"({'.'.join(steps[:-1]) or 'the file'} is not a table)"
        )
    return node, steps[-1], created


def _class_by_name(classes, steps: list[str], key: str, path: Path):
    """The class the longest run of next steps names (a name may hold dots), and how many steps it took."""
    if not steps:
        raise SpecmonError(f"policy {path}: {key!r}: name a class, as classes.NAME.KEY or classes[I].KEY")
    for used in range(len(steps), 0, -1):
        name = ".".join(steps[:used])
        for entry in classes:
            if isinstance(entry, dict) and entry.get("name") == name:
                return entry, used
    raise SpecmonError(f"policy {path}: no class named {steps[0] if steps else ''!r} (in {key!r})")


def _parse_value(value: str, path: Path):
    """VALUE as exactly one TOML value: anything after it (a second line, a table) is refused."""
    value = value.strip(" \t")
    try:
        return tomlkit.value(value)
    except (TOMLKitError, ValueError, RecursionError) as exc:
        if _BARE_WORD.fullmatch(value):
            return tomlkit.string(value)  # a bare word such as off or enforce
        reason = str(exc).split(" at line")[0] if isinstance(exc, TOMLKitError) else type(exc).__name__
    raise SpecmonError(
        f"policy {path}: VALUE {value[:60]!r} is not one TOML value ({reason}); "
        "a string with spaces or symbols needs quotes: '\"text\"'"
    )
