"""Policy files: TOML read into checked structs; every error names file, line, column and reason."""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import msgspec
import tomlkit
from tomlkit.exceptions import TOMLKitError

from specmon.errors import SpecmonError
from specmon.data import resolve
from specmon.engine.draft_len import MAX_DRAFT_LEN


class Settings(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    mode: Literal["enforce", "advise"] = "enforce"
    evidence_window: int = 64  # rounds per (class, k) that a decision looks at
    min_rounds: int = 16  # rounds needed at a draft length before deciding on it
    plain_rounds: int = 8  # rounds in each plain re-measure (and needed at k = 0): plain rounds vary little
    min_gain: float = 0.03  # speculation must beat plain goodput by this fraction to stay on
    hysteresis: float = 0.05  # extra gain needed to switch back on, so it does not flap
    remeasure_every: int = 6  # every Nth prompt of a class starts with a short plain (k = 0) run
    probe_every: int = 4  # every Nth prompt starts with a short run at another k (or at k while off)


class DraftLen(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    min: int
    max: int
    start: int = 0  # 0 means min
    adapt: Literal["goodput", "none"] = "goodput"  # move k toward the best measured goodput


class Match(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    regex: list[str] = []
    keywords: list[str] = []
    script: list[Literal["latin", "cjk", "cyrillic", "arabic", "greek", "non-ascii"]] = []
    min_chars: int = 0
    max_chars: int = 0  # 0 means no limit
    tag: str = ""  # the class a request names explicitly (a prompt's "class")


class PromptClass(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    name: str
    match: Match = Match()
    default: bool = False  # catches every prompt no earlier class matched
    speculate: Literal["auto", "on", "off"] = "auto"
    draft_len: int | DraftLen = 4


class PolicyFile(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    policy: Settings = Settings()
    classes: list[PromptClass] = []


@dataclass(frozen=True)
class Policy:
    settings: Settings
    classes: list[PromptClass]
    source: str
    text: str
    sha256: str
    warnings: list[str]

    def line_of(self, *path) -> int:
        return locate(self.text, path)[0]

    def class_index(self, name: str) -> int:
        return next(i for i, c in enumerate(self.classes) if c.name == name)


class PolicyError(SpecmonError):
    def __init__(self, source: str, line: int, column: int, reason: str):
        super().__init__(f"{source}:{line}:{column}: {reason}")
        self.line, self.column, self.reason = line, column, reason


def load_policy(path: Path | str) -> Policy:
    """A policy file, or a shipped policy by name (`default`): the working directory first."""
    path = resolve("policies", str(path))
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecmonError(f"policy {path}: cannot read it ({exc.strerror})") from None
    return parse_policy(text, str(path))


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    """Parse, validate and warn; the first error raises PolicyError with its location."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _syntax_error(text, source, exc) from None
    try:
        parsed = msgspec.convert(raw, PolicyFile)
    except msgspec.ValidationError as exc:
        path = _msgspec_path(str(exc))
        line, col = locate(text, path)
        raise PolicyError(source, line, col, str(exc).split(" - at ")[0]) from None
    warnings = _check(parsed, text, source)
    digest = hashlib.sha256(text.encode()).hexdigest()
    return Policy(parsed.policy, parsed.classes, source, text, digest, warnings)


def _check(parsed: PolicyFile, text: str, source: str) -> list[str]:
    """Semantic checks msgspec cannot do; errors raise, overlaps and unreachable classes warn."""
    s = parsed.policy
    for key, value, ok in [("evidence_window", s.evidence_window, s.evidence_window >= 1),
                           ("min_rounds", s.min_rounds, 1 <= s.min_rounds <= s.evidence_window),
                           ("plain_rounds", s.plain_rounds, 1 <= s.plain_rounds <= s.evidence_window),
                           ("min_gain", s.min_gain, -1 < s.min_gain < 10), ("hysteresis", s.hysteresis, s.hysteresis >= 0),
                           ("remeasure_every", s.remeasure_every, s.remeasure_every >= 0),
                           ("probe_every", s.probe_every, s.probe_every >= 0)]:
        if not ok:
            line, col = locate(text, ("policy", key))
            raise PolicyError(source, line, col, f"policy.{key} = {value} is out of range")
    if not parsed.classes:
        raise PolicyError(source, 1, 1, "no [[classes]]: add at least a default class")
    names, warnings = set(), []
    for i, cls in enumerate(parsed.classes):
        _check_class(cls, i, names, text, source)
        names.add(cls.name)
    defaults = [i for i, c in enumerate(parsed.classes) if c.default]
    if not defaults:
        raise PolicyError(source, *locate(text, ("classes", len(parsed.classes) - 1)),
                          "no class has default = true: some prompts would have no class")
    for i in range(defaults[0] + 1, len(parsed.classes)):
        line, col = locate(text, ("classes", i))
        warnings.append(f"{source}:{line}:{col}: class {parsed.classes[i].name!r} is unreachable: "
                        f"the default class {parsed.classes[defaults[0]].name!r} comes first")
    warnings.extend(_overlaps(parsed.classes, text, source))
    return warnings


def _check_class(cls: PromptClass, i: int, names: set, text: str, source: str) -> None:
    if cls.name in names:
        raise PolicyError(source, *locate(text, ("classes", i, "name")), f"class name {cls.name!r} is used twice")
    for j, pattern in enumerate(cls.match.regex):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise PolicyError(source, *locate(text, ("classes", i, "match", "regex")),
                              f"bad regular expression {pattern!r}: {exc}") from None
    k = cls.draft_len
    if isinstance(k, int):
        if not 0 <= k <= MAX_DRAFT_LEN:
            raise PolicyError(source, *locate(text, ("classes", i, "draft_len")),
                              f"draft_len = {k} must be 0..{MAX_DRAFT_LEN}")
    elif not 1 <= k.min <= k.max <= MAX_DRAFT_LEN or (k.start and not k.min <= k.start <= k.max):
        raise PolicyError(source, *locate(text, ("classes", i, "draft_len")),
                          f"draft_len range min={k.min} max={k.max} start={k.start} is empty or out of 1..{MAX_DRAFT_LEN}")
    if cls.match.max_chars and cls.match.max_chars < cls.match.min_chars:
        raise PolicyError(source, *locate(text, ("classes", i, "match", "max_chars")), "max_chars < min_chars")


def _overlaps(classes: list[PromptClass], text: str, source: str) -> list[str]:
    """Two classes with the same keyword or regex: the later one never sees those prompts."""
    seen: dict[str, str] = {}
    warnings = []
    for i, cls in enumerate(classes):
        for key in [*(f"keyword {k.lower()!r}" for k in cls.match.keywords), *(f"regex {r!r}" for r in cls.match.regex)]:
            if key in seen and seen[key] != cls.name:
                line, col = locate(text, ("classes", i, "match"))
                warnings.append(f"{source}:{line}:{col}: class {cls.name!r} overlaps {seen[key]!r} on {key}; "
                                f"first match wins")
            seen.setdefault(key, cls.name)
    return warnings


# -- locations -----------------------------------------------------------------------------

_HEADER = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.\-]+)\s*\]\]?\s*(#.*)?$")


def locate(text: str, path: tuple) -> tuple[int, int]:
    """(line, column), 1-based, of a key path like ("classes", 2, "draft_len") or ("policy", "mode").

    Falls back to the nearest enclosing table header, then to line 1."""
    table, index, keys = _split_path(path)
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
            want = keys[-1]
            prefix = ".".join(keys[len(current.split(".")) - 1:-1])
            name = f"{prefix}.{want}" if prefix else want
            if re.match(rf"^\s*{re.escape(name)}\s*=", line) or re.match(rf"^\s*{re.escape(keys[0])}\s*=", line):
                return number, line.index(line.strip()[0]) + 1
    return best


def _split_path(path: tuple) -> tuple[str, int, list[str]]:
    parts = list(path)
    table = str(parts.pop(0)) if parts else ""
    index = parts.pop(0) if parts and isinstance(parts[0], int) else -1
    return table, index, [str(p) for p in parts]


def _msgspec_path(message: str) -> tuple:
    """'... - at `$.classes[1].match.regex[0]`' -> ("classes", 1, "match", "regex")."""
    found = re.search(r"at `\$(.*)`", message)
    path: list = []
    for name, number in re.findall(r"\.([A-Za-z_]+)|\[(\d+)\]", found.group(1) if found else ""):
        path.append(name if name else int(number))
    if path and isinstance(path[-1], int) and len(path) > 2:
        path.pop()  # an element inside a list: point at the list's key
    unknown = re.search(r"unknown field `([^`]+)`", message)
    if unknown:
        path.append(unknown.group(1))
    return tuple(path)


def _syntax_error(text: str, source: str, exc: Exception) -> PolicyError:
    """tomlkit (which edits these files) names a syntax error's line; tomllib sometimes says
    only "end of document"."""
    try:
        tomlkit.parse(text)
    except TOMLKitError as kit:
        if getattr(kit, "line", None):
            reason = str(kit).rsplit(" at line", 1)[0]
            return PolicyError(source, kit.line, kit.col, f"invalid TOML: {reason}")
    found = re.search(r"at line (\d+), column (\d+)", str(exc))
    line, col = (int(found.group(1)), int(found.group(2))) if found else (len(text.splitlines()) or 1, 1)
    return PolicyError(source, line, col, f"invalid TOML: {str(exc).split(' (at')[0]}")
