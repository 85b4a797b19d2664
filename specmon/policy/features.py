"""What a prompt is, from its shape rather than its wording: does it give code (or data) or a
passage of text for the answer to work on, and what share of it is such given material.

The instruction is the prompt's shortest block (blocks are split at blank lines and code fences);
every other block is given material. A block is code when it is fenced, dense in brackets, quotes,
commas and bars (data: JSON, CSV, tables), or when most of its lines look like code (_CODE_LINE).
None of this reads English words."""

from __future__ import annotations

import re
from dataclasses import dataclass

_FENCE = re.compile(r"```.*?(?:```|$)", re.S)
_BLANK = re.compile(r"\n\s*\n")
_QUOTED = re.compile(r"[\"“«„'][^\"”»“]{60,}[\"”»“']")
_BRACKETED = re.compile(r"[\[{].{38,}[\]}]", re.S)  # inline data: a JSON list or object
_CODE_LINE = re.compile(r"^(\s{2,}|\t).*\S|.*[(){}\[\]=;<>].*[:{;,)\]}]\s*$|^\s*[{\[<].*[}\]>],?\s*$")
MIN_PASSAGE = 120  # characters of given prose that make a passage
MIN_CODE = 40
_SYMBOLS = frozenset('{}[]()":,;|=<>_')
SYMBOL_SHARE = 0.08  # a block this dense in brackets, quotes, commas and bars is code or data, not prose


@dataclass(frozen=True)
class Features:
    code: bool  # code or structured data is given
    passage: bool  # a passage of prose is given
    given_share: float  # given characters / prompt characters


def prompt_features(text: str) -> Features:
    code_chars = sum(len(m) for m in _FENCE.findall(text))
    blocks = [b for b in _BLANK.split(_FENCE.sub("\n\n", text)) if b.strip()]
    given: list[str] = []
    if len(blocks) >= 2:
        shortest = min(range(len(blocks)), key=lambda i: len(blocks[i].strip()))
        given = [b for i, b in enumerate(blocks) if i != shortest]
    elif blocks:  # one block: what follows a line ending in ':', else its long quoted and bracketed spans
        lines = blocks[0].splitlines()
        after = next((i + 1 for i, line in enumerate(lines[:-1]) if line.rstrip().endswith(":")), None)
        given = ["\n".join(lines[after:])] if after else _QUOTED.findall(blocks[0]) + _BRACKETED.findall(blocks[0])
    coded = sum(len(block) for block in given if _looks_like_code(block))
    prose = sum(map(len, given)) - coded
    code_chars += coded
    return Features(code_chars >= MIN_CODE, prose >= MIN_PASSAGE, min(1.0, (code_chars + prose) / max(len(text), 1)))


def _looks_like_code(block: str) -> bool:
    if sum(ch in _SYMBOLS for ch in block) >= SYMBOL_SHARE * len(block.strip()):
        return True  # data: JSON, CSV, tables, even on one line
    lines = [ln for ln in block.splitlines() if ln.strip()]
    if len(lines) < 2:
        return False
    return sum(bool(_CODE_LINE.match(ln)) for ln in lines) * 2 >= len(lines)
