"""Where in a policy file's text a key is: (line, column), 1-based, for errors and warnings."""

from __future__ import annotations

import re


def line_col(text: str, offset: int) -> tuple[int, int]:
    line_start = text.rfind("\n", 0, offset) + 1
    return text.count("\n", 0, offset) + 1, offset - line_start + 1


def too_deep(text: str, limit: int) -> tuple[int, int]:
    """Where brackets first nest deeper than `limit`; brackets inside strings count too, which
    is a fair guess for a file tomllib gave up on."""
    depth = 0
    for offset, ch in enumerate(text):
        depth += (ch in "[{") - (ch in "]}")
        if depth > limit:
            return line_col(text, offset)
    return 1, 1


_HEADER = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.\-]+)\s*\]\]?\s*(#.*)?$")


def locate(text: str, path: tuple) -> tuple[int, int]:
    """(line, column), 1-based, of a key path like ("classes", 2, "draft_len"), else of its table, else (1, 1)."""
    parts = list(path)
    table = str(parts.pop(0)) if parts else ""
    index = parts.pop(0) if parts and isinstance(parts[0], int) else -1
    keys = [str(p) for p in parts]
    current, entry, in_scope, best = "", -1, False, (1, 1)
    for number, line in enumerate(text.splitlines(), 1):
        header = _HEADER.match(line)
        if header:
            current = header.group(2)
            top = current.split(".")[0]
            if header.group(1) == "[[" and current == top:
                entry = entry + 1 if top == table else entry
            in_scope = top == table and (index < 0 or entry == index)
            if in_scope and current.split(".")[1:] == keys:
                return number, 1  # the key is itself a table, e.g. [classes.draft_len]
            if in_scope and current == table:
                best = (number, 1)
            continue
        if in_scope and keys:
            name = ".".join([*keys[len(current.split(".")) - 1 : -1], keys[-1]])  # as written under `current`
            # `name = ...`, or a dotted key under it (`ngram.max_match = 3` names the table ngram)
            if re.match(rf"^\s*{re.escape(name)}\s*[=.]", line) or re.match(rf"^\s*{re.escape(keys[0])}\s*=", line):
                return number, line.index(line.strip()[0]) + 1
    return best


def msgspec_path(message: str) -> tuple:
    """'... - at `$.classes[1].match.regex[0]`' -> ("classes", 1, "match", "regex")."""
    found = re.search(r"at `\$(.*)`", message)
    steps = re.findall(r"\.([A-Za-z_]+)|\[(\d+)\]", found.group(1) if found else "")
    path = [name or int(number) for name, number in steps]
    if path and isinstance(path[-1], int) and len(path) > 2:
        path.pop()  # an element inside a list: point at the list's key
    unknown = re.search(r"unknown field `([^`]+)`", message)
    if unknown:
        path.append(unknown.group(1))
    return tuple(path)
