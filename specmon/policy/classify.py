"""Which class a prompt belongs to, and which rule said so (first match wins)."""

from __future__ import annotations

import hashlib
import unicodedata
from collections import Counter

import msgspec

from specmon.errors import SpecmonError
from specmon.policy.features import prompt_features
from specmon.policy.regex import compile_regex
from specmon.policy.schema import Policy, PromptClass


def matches_of(cls: PromptClass) -> str:
    """Which prompts a class takes, as a digest: a store learned under other rules measured other prompts."""
    return hashlib.sha256(msgspec.json.encode([cls.match, cls.default])).hexdigest()[:16]


def classify(policy: Policy, text: str, tag: str | None = None) -> tuple[str, str]:
    """(class name, the rule that matched as `classes[i].match.KEY (line N)`)."""
    for i, cls in enumerate(policy.classes):
        key = _matching_key(cls, text, tag)
        if key:
            path = ("classes", i, "match", key) if key != "default" else ("classes", i, "default")
            return cls.name, f"classes[{i}].{'match.' if key != 'default' else ''}{key} (line {policy.line_of(*path)})"
    return policy.classes[-1].name, "last class (no rule matched)"


class UnknownClass(SpecmonError):
    """A prompt named a class the policy in force does not have."""


def named_class(policy: Policy, named: str) -> tuple[str, str]:
    """The class a request names: by its match.tag, then by its name, whatever its text says (a text
    rule of an earlier class must not shadow a name). UnknownClass if the policy has neither."""
    for i, cls in enumerate(policy.classes):
        if cls.match.tag and cls.match.tag == named:
            return cls.name, f"classes[{i}].match.tag (line {policy.line_of('classes', i, 'match', 'tag')})"
    for i, cls in enumerate(policy.classes):
        if cls.name == named:
            return named, f"named by the request (classes[{i}].name)"
    shown = repr(named) if len(named) <= 60 else repr(named[:57]) + "..."  # a refusal need not echo a megabyte
    raise UnknownClass(
        f"specmon_class {shown}: the policy has no class or match.tag of that name "
        f"(classes: {', '.join(c.name for c in policy.classes)})"
    )


def _matching_key(cls: PromptClass, text: str, tag: str | None) -> str | None:
    """The key that puts `text` in the class: any one of regex, keywords, script, content/min_given
    (both, where both are set); min_chars / max_chars narrow each of them and alone match by length;
    a tag the request names always does."""
    m = cls.match
    if m.tag and tag == m.tag:
        return "tag"
    sized = bool(m.min_chars or m.max_chars)
    if sized and not (len(text) >= m.min_chars and (not m.max_chars or len(text) <= m.max_chars)):
        return "default" if cls.default else None
    if m.regex and any(compile_regex(p).search(text) for p in m.regex):
        return "regex"
    lowered = text.lower()
    if m.keywords and any(k.lower() in lowered for k in m.keywords):
        return "keywords"
    if m.script and (dominant_script(text) in m.script or ("non-ascii" in m.script and _non_ascii_share(text) > 0.03)):
        return "script"
    if m.content or m.min_given:
        found = prompt_features(text)
        kinds = {"code": found.code, "passage": found.passage}
        if (not m.content or any(kinds[c] for c in m.content)) and found.given_share >= m.min_given:
            return "content" if m.content else "min_given"
    elif sized and not (m.regex or m.keywords or m.script):
        return "min_chars" if m.min_chars else "max_chars"
    return "default" if cls.default else None


def dominant_script(text: str) -> str:
    """The script most of the letters are written in: latin, cjk, cyrillic, arabic or greek."""
    names = (unicodedata.name(ch, "") for ch in text if ch.isalpha())
    counts = Counter(next((s for s, key in _SCRIPTS if key in name), "other") for name in names)
    return counts.most_common(1)[0][0] if counts else "latin"


# (script, a word of its letters' Unicode names)
_SCRIPTS = [("cjk", word) for word in ("CJK", "HIRAGANA", "KATAKANA", "HANGUL")]
_SCRIPTS += [(word.lower(), word) for word in ("CYRILLIC", "ARABIC", "GREEK", "LATIN")]


def _non_ascii_share(text: str) -> float:
    letters = [ch for ch in text if ch.isalpha()]
    return sum(not ch.isascii() for ch in letters) / len(letters) if letters else 0.0
