"""Policy files: TOML read into checked structs; every error names file, line, column and reason."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import math
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

import msgspec
import tomlkit
from tomlkit.exceptions import TOMLKitError

from specmon.errors import SpecmonError
from specmon.data import resolve
from specmon.engine.draft_len import MAX_DRAFT_LEN
from specmon.policy.locate import line_col, locate, msgspec_path, too_deep
from specmon.policy.regex import RegexError, compile_regex

MAX_POLICY_BYTES = 1 << 20  # read once a round while a run watches the file: a policy is a page, not a dump
MAX_WINDOW = 10_000  # window's bound: a deque of this many rounds per class is still small
# keys of older files that no longer decide anything: read with a warning, so such a file still loads
RETIRED = {
    "policy": (
        "evidence_window",
        "min_rounds",
        "plain_rounds",
        "hysteresis",
        "remeasure_every",
        "probe_every",
        "interval",
        "prompt_rounds",
        "silent_plain",
        "prompt_off",
    ),
    "class": ("ngram",),
}
MAX_CHARS = 100_000_000  # match.min_chars / max_chars
CLASS_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,40}")  # shown in tables and TUI markup, used as a key in events
NO_CLASSES = "no [[classes]]: add at least a default class"  # the whole file's: listed after located ones
TOO_DEEP = 32  # arrays / inline tables nested deeper than this are reported where they get there


# the choice keys' values (also listed by the error that names a wrong one)
Mode = Literal["enforce", "advise"]
Script = Literal["latin", "cjk", "cyrillic", "arabic", "greek", "non-ascii"]
Content = Literal["code", "passage"]
Speculate = Literal["auto", "on", "off"]
_CHOICES = {"mode": Mode, "script": Script, "content": Content, "speculate": Speculate}


class Settings(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    mode: Mode = "enforce"
    min_gain: float = 0.02  # a draft is verified only if its expected goodput beats a plain step's by this
    window: int = 256  # drafting rounds per class its acceptance is learned from
    explore_budget: float = 0.005  # of a class's time that verifying drafts its table cuts may cost, to learn


class Routing(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """`specmon proxy` with a plain upstream beside the speculating one (policy.route)."""

    explore_share: float = 0.05  # of a class's requests sent to the side it is not on, to notice a change
    window: int = 8  # each side's last requests a class's estimate is drawn from
    min_requests: int = 8  # timed requests on each side before a class's first choice


class Match(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    regex: list[str] = []
    keywords: list[str] = []
    script: list[Script] = []
    min_chars: int = 0
    max_chars: int = 0  # 0 means no limit
    tag: str = ""  # the class a request names explicitly (a prompt's "class")
    content: list[Content] = []  # the prompt gives code (or data), or a passage of text
    min_given: float = 0.0  # at least this share of the prompt's characters is given material


class PromptClass(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    name: str
    match: Match = Match()
    default: bool = False  # catches every prompt no earlier class matched
    speculate: Speculate = "auto"
    draft_len: int = 8  # the longest draft; under auto each round verifies what pays of it


class PolicyFile(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    policy: Settings = Settings()
    routing: Routing = Routing()
    classes: list[PromptClass] = []


@dataclass(frozen=True)
class Policy:
    settings: Settings
    classes: list[PromptClass]
    source: str
    text: str
    sha256: str
    warnings: list[str]
    stamp: tuple[int, int, int] | None = None  # the file as it was read (file_stamp): an edit after it is a reload
    routing: Routing = Routing()

    def line_of(self, *path) -> int:
        return locate(self.text, path)[0]

    def class_named(self, name: str) -> PromptClass:
        """The class by name, or the default class where none has it (a reload removed it)."""
        return self._by_name.get(name) or next(c for c in self.classes if c.default)

    @functools.cached_property
    def _by_name(self) -> dict[str, PromptClass]:
        return {c.name: c for c in self.classes}  # looked up several times a round


class PolicyError(SpecmonError):
    """The first problem of a file; `problems` holds each one found, this one first, for `policy check`."""

    def __init__(self, source: str, line: int, column: int, reason: str):
        super().__init__(f"{source}:{line}:{column}: {reason}")
        self.line, self.column, self.reason = line, column, reason
        self.problems: list[PolicyError] = [self]


def load_policy(path: Path | str) -> Policy:
    """A policy file, or a shipped policy by name (`default`): the working directory first."""
    path = resolve("policies", str(path))
    stamp = file_stamp(str(path))  # before reading: an edit while the model loads is still seen as one
    return dataclasses.replace(parse_policy(read_policy_text(path), str(path)), stamp=stamp)


def file_stamp(path: str) -> tuple[int, int, int] | None:
    """What says the file changed: an atomic rename (a new inode) within one clock tick included."""
    try:
        stat = os.stat(path)
        return stat.st_mtime_ns, stat.st_size, stat.st_ino
    except OSError:
        return None


def read_policy_text(path: Path | str, keep_newlines: bool = False) -> str:
    """The file's text, as `Path.read_text` gives it (newlines as \\n, unless kept) but strictly
    UTF-8: a file that is not, or is larger than MAX_POLICY_BYTES, is refused with a location."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_POLICY_BYTES + 1)
    except OSError as exc:
        raise SpecmonError(f"policy {path}: cannot read it ({exc.strerror})") from None
    if len(data) > MAX_POLICY_BYTES:
        raise PolicyError(str(path), 1, 1, f"the file is larger than {MAX_POLICY_BYTES >> 10} KiB: not a policy")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, col = line_col(before := data[: exc.start].decode("utf-8"), len(before))
        reason = f"not UTF-8 (byte 0x{data[exc.start]:02x}): save the file as UTF-8"
        raise PolicyError(str(path), line, col, reason) from None
    return text if keep_newlines else text.replace("\r\n", "\n").replace("\r", "\n")


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    """Parse, validate and warn; errors raise one PolicyError, located, with each problem found in `problems`
    (a file that is not TOML has just its first)."""
    text = text.removeprefix("\ufeff")  # a byte-order mark, as some editors save UTF-8
    raw = load_toml(text, source)
    retired = _retire(raw, text, source)
    problems: list[PolicyError] = []
    parsed, dropped = _convert(raw, text, source, problems)
    # a dropped `default` is no missing default class: that check waits for the fixed file
    guessing = any(path[-1] == "default" for path in dropped)
    warnings = retired + (_check(parsed, text, source, problems, guessing) if parsed else [])
    if problems:  # raised in file order as one PolicyError, the first
        ordered = sorted(problems, key=lambda p: (p.reason == NO_CLASSES, p.line, p.column))  # the file's own last
        ordered[0].problems = ordered
        raise ordered[0]
    digest = hashlib.sha256(text.encode()).hexdigest()
    return Policy(parsed.policy, parsed.classes, source, text, digest, warnings, routing=parsed.routing)


def _convert(raw: dict, text: str, source: str, problems: list) -> tuple[PolicyFile | None, list[tuple]]:
    """msgspec's reading with each wrong key noted and dropped (its default stands in), and the keys dropped."""
    dropped: list[tuple] = []
    while True:
        try:
            return msgspec.convert(raw, PolicyFile), dropped
        except msgspec.ValidationError as exc:
            path = msgspec_path(str(exc))
            problems.append(PolicyError(source, *locate(text, path), _readable(str(exc)) + _did_you_mean(path)))
            if not _drop(raw, path):
                return None, dropped  # a whole class, or the file, cannot be read past
            dropped.append(path)


def _drop(raw: dict, path: tuple) -> bool:
    """Take the key at `path` out of `raw`; False where the path ends at a class or is not a key found."""
    if not path or not isinstance(path[-1], str):
        return False  # a class as a whole: dropping it would shift the later classes' positions
    parent = raw
    for part in path[:-1]:
        try:
            parent = parent[part]
        except (KeyError, IndexError, TypeError):
            return False
    return isinstance(parent, dict) and parent.pop(path[-1], None) is not None


def _retire(raw: dict, text: str, source: str) -> list[str]:
    """Take an older file's retired keys out of `raw`, one warning each; a draft_len range is read as its max."""
    warnings, why = [], "no longer read: each draft is weighed against the engine's measured costs (docs/policy.md)"

    def warn(path: tuple, what: str) -> None:
        line, col = locate(text, path)
        warnings.append(f"{source}:{line}:{col}: {what}")

    settings = raw.get("policy")
    for key in RETIRED["policy"] if isinstance(settings, dict) else ():
        if settings.pop(key, None) is not None:
            warn(("policy", key), f"policy.{key} is {why}")
    classes = raw.get("classes")
    for i, cls in enumerate(classes if isinstance(classes, list) else ()):
        if not isinstance(cls, dict):
            continue
        for key in RETIRED["class"]:
            if cls.pop(key, None) is not None:
                warn(("classes", i, key), f"classes[{i}].{key} is {why}")
        span = cls.get("draft_len")
        if isinstance(span, dict) and "max" in span:
            cls["draft_len"] = span["max"]
            read_as = f"a draft_len range is read as draft_len = {span['max']!r}, its max"
            warn(("classes", i, "draft_len"), f"{read_as}: each round verifies what pays of it")
    return warnings


def load_toml(text: str, source: str) -> dict:
    """tomllib's reading; every way it can fail becomes a located PolicyError."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _syntax_error(text, source, exc) from None
    except RecursionError:
        reason = f"arrays or tables nested too deeply (over {TOO_DEEP})"
        raise PolicyError(source, *too_deep(text, TOO_DEEP), reason) from None
    except ValueError:  # an integer of more than 4300 digits
        found = re.search(r"[0-9_]{1000,}", text)
        line, col = line_col(text, found.start()) if found else (1, 1)
        raise PolicyError(source, line, col, "invalid TOML: a number of more than 4300 digits") from None


def _check(parsed: PolicyFile, text: str, source: str, problems: list, guessing: bool = False) -> list[str]:
    """Semantic checks msgspec cannot do; errors go to `problems`, overlaps and unreachable classes warn."""
    s, r = parsed.policy, parsed.routing
    for section, key, ok, allowed in [
        ("policy", "window", 1 <= s.window <= MAX_WINDOW, f"1..{MAX_WINDOW}"),
        ("policy", "min_gain", math.isfinite(s.min_gain) and -1 < s.min_gain < 10, "a number above -1 and below 10"),
        ("policy", "explore_budget", math.isfinite(s.explore_budget) and 0 <= s.explore_budget <= 0.5, "0..0.5"),
        ("routing", "explore_share", 0.0 <= r.explore_share <= 0.5, "0..0.5 (a share of each class's requests)"),
        ("routing", "window", 2 <= r.window <= MAX_WINDOW, f"2..{MAX_WINDOW} requests"),
        ("routing", "min_requests", 2 <= r.min_requests <= r.window, "2..routing.window"),
    ]:
        if not ok:
            value = _shown(getattr(getattr(parsed, section), key))
            reason = f"{section}.{key} = {value} is out of range: {allowed}"
            problems.append(PolicyError(source, *locate(text, (section, key)), reason))
    if not parsed.classes:
        problems.append(PolicyError(source, 1, 1, NO_CLASSES))
        return []
    names, warnings = set(), []
    for i, cls in enumerate(parsed.classes):
        _check_class(cls, i, names, text, source, problems)
        names.add(cls.name)
    defaults = [i for i, c in enumerate(parsed.classes) if c.default]
    if not defaults:
        if not guessing:
            last = locate(text, ("classes", len(parsed.classes) - 1))
            problems.append(PolicyError(source, *last, "no class has default = true: some prompts would have no class"))
        return warnings
    for i in range(defaults[0] + 1, len(parsed.classes)):
        line, col = locate(text, ("classes", i))
        warnings.append(
            f"{source}:{line}:{col}: class {parsed.classes[i].name!r} is unreachable: "
            f"the default class {parsed.classes[defaults[0]].name!r} comes first"
        )
    warnings.extend(_overlaps(parsed.classes, text, source))
    return warnings


def _check_class(cls: PromptClass, i: int, names: set, text: str, source: str, problems: list) -> None:
    """A class's own problems, each to `problems`."""

    def problem(key: tuple, reason: str) -> None:
        problems.append(PolicyError(source, *locate(text, ("classes", i, *key)), reason))

    if not CLASS_NAME.fullmatch(cls.name):
        problem(("name",), f"class name {_shown(cls.name)} must be 1 to 40 of: letters, digits, '-', '_', '.'")
    if cls.name in names:
        problem(("name",), f"class name {cls.name!r} is used twice")
    for pattern in cls.match.regex:
        try:
            compile_regex(pattern)
        except RegexError as exc:
            problem(("match", "regex"), f"bad regular expression {_shown(pattern)}: {exc}")
    for key, most in (("min_chars", MAX_CHARS), ("max_chars", MAX_CHARS), ("min_given", 1)):
        if not 0 <= (value := getattr(cls.match, key)) <= most:
            share = " (a share of the prompt)" if key == "min_given" else ""
            problem(("match", key), f"match.{key} = {_shown(value)} must be 0..{most}{share}")
    if not 0 <= cls.draft_len <= MAX_DRAFT_LEN:
        problem(("draft_len",), f"draft_len = {cls.draft_len} must be 0..{MAX_DRAFT_LEN}")
    if cls.match.max_chars and cls.match.max_chars < cls.match.min_chars:
        problem(("match", "max_chars"), "max_chars < min_chars")


def _overlaps(classes: list[PromptClass], text: str, source: str) -> list[str]:
    """Two classes with the same keyword or regex: the later one never sees those prompts."""
    seen: dict[str, str] = {}
    warnings = []
    for i, cls in enumerate(classes):
        for key in [
            *(f"keyword {k.lower()!r}" for k in cls.match.keywords),
            *(f"regex {r!r}" for r in cls.match.regex),
        ]:
            if key in seen and seen[key] != cls.name:
                line, col = locate(text, ("classes", i, "match"))
                warnings.append(
                    f"{source}:{line}:{col}: class {cls.name!r} overlaps {seen[key]!r} on {key}; first match wins"
                )
            seen.setdefault(key, cls.name)
    return warnings


def _shown(value) -> str:
    """A value for an error message, cut short: a name of a million characters is still one line."""
    shown = repr(value) if isinstance(value, str) else str(value)
    return shown if len(shown) <= 60 else f"{shown[:40]}... ({len(shown)} characters)"


def _readable(message: str) -> str:
    """msgspec's reason after the key it is about, and for a bad choice, the choices (_CHOICES)."""
    reason, _, where = message.partition(" - at `$")
    where = where.rstrip("`").lstrip(".")
    if reason.startswith("Invalid enum value") and where:
        choices = _CHOICES.get(re.sub(r"\[\d+\]", "", where).rsplit(".", 1)[-1])
        reason += f" (one of: {', '.join(get_args(choices))})" if choices else ""
    return f"{where}: {reason}" if where and "unknown field" not in reason else reason


def _did_you_mean(path: tuple) -> str:
    """For an unknown key, the key of its table it is closest to (`draft_lenght`: `draft_len`)."""
    if not path or not isinstance(path[-1], str):
        return ""
    names = [p for p in path[:-1] if isinstance(p, str)]
    struct = {(): PolicyFile, ("policy",): Settings, ("routing",): Routing, ("classes",): PromptClass}.get(
        tuple(names), Match if names == ["classes", "match"] else None
    )
    known = [*struct.__struct_fields__, *RETIRED["class" if struct is PromptClass else "policy"]] if struct else []
    close = difflib.get_close_matches(path[-1], known, n=1)
    return f"; did you mean `{close[0]}`?" if close and close[0] != path[-1] else ""


def _syntax_error(text: str, source: str, exc: Exception) -> PolicyError:
    """tomlkit's location of a syntax error, where it has one: tomllib sometimes says only "end of document"."""
    try:
        tomlkit.parse(text)
    except TOMLKitError as kit:
        if getattr(kit, "line", None) and "\\x00" not in str(kit):  # "\x00": tomlkit's end of text
            reason = str(kit).rsplit(" at line", 1)[0]
            return PolicyError(source, kit.line, max(kit.col, 1), f"invalid TOML: {reason}")
    except (ValueError, RecursionError):
        pass  # tomlkit gives up too (huge integer, deep nesting): tomllib's own words below
    found = re.search(r"at line (\d+), column (\d+)", str(exc))
    lines = text.splitlines() or [""]
    line, col = (int(found.group(1)), int(found.group(2))) if found else (len(lines), len(lines[-1]) + 1)
    return PolicyError(source, line, col, f"invalid TOML: {re.sub(r' [(]at line .*[)]$', '', str(exc))}")
