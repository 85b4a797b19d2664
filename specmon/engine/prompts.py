"""Prompt sets: the built-in suite (five classes, four prompts each) or JSON lines from a file.

A file's rows are typed (`PromptRow`) the way the log's events are, so every value accepted
here is one the log's reader accepts back: strings are text, counts are integers, not booleans."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated

import msgspec

from specmon.errors import SpecmonError
from specmon.textfile import read_user_text

MAX_NEW_TOKENS = 2**31 - 1  # fits every reader; the KV cache check refuses far less
# a \uD800-\uDBFF escape with no \uDC00-\uDFFF after it, or the reverse: valid JSON, but not text
_LONE_SURROGATE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str
    prompt_class: str
    max_new_tokens: int | None = None
    token_ids: tuple[int, ...] | None = None  # already encoded (a server's request); else the chat template's
    end_ids: tuple[int, ...] | None = None  # tokens that end the reply (a server's request); None: the model's eos
    min_tokens: int = 0  # the end tokens are masked out of the target's choice until this many are generated
    phase: str = ""  # a stretch of a prompt stream (`bench policy` reports each apart): the file's "phase"


BUILTIN = resources.files("specmon.data") / "prompts" / "builtin.jsonl"  # five classes, four prompts each


def builtin_suite(classes: list[str] | None = None) -> list[Prompt]:
    return _of_classes(load_prompts(Path(str(BUILTIN))), classes, "the built-in suite")


def prompt_set(path: Path | None, classes: str | None) -> list[Prompt]:
    """The prompts of `--prompts FILE` (else the built-in suite), keeping only the `--classes` listed
    (comma-separated); a class the set does not have is refused, naming the ones it has."""
    wanted = None if classes is None else [name.strip() for name in classes.split(",") if name.strip()]
    if wanted == []:
        raise SpecmonError(f"--classes {classes!r}: expected comma-separated class names")
    if path is None:
        return builtin_suite(wanted)
    return _of_classes(load_prompts(path), wanted, f"prompts file {path}")


def _of_classes(prompts: list[Prompt], classes: list[str] | None, where: str) -> list[Prompt]:
    have = list(dict.fromkeys(p.prompt_class for p in prompts))
    missing = [name for name in classes or [] if name not in have]
    if missing:
        raise SpecmonError(f"--classes: {where} has no class {missing[0]!r}; its classes: {', '.join(have)}")
    return [p for p in prompts if not classes or p.prompt_class in classes]


class PromptRow(msgspec.Struct):
    """One line of a prompts file. Unknown keys are allowed (notes, expected answers)."""

    id: Annotated[str, msgspec.Meta(min_length=1)]
    prompt: str
    prompt_class: Annotated[str, msgspec.Meta(min_length=1)] = msgspec.field(name="class", default="default")
    max_new_tokens: Annotated[int, msgspec.Meta(ge=1, le=MAX_NEW_TOKENS)] | None = None
    phase: str = ""  # where the stream's content changes (a drift benchmark): reported apart


_ROW = msgspec.json.Decoder(PromptRow)
MAX_PROBLEMS = 3  # listed in the one error line; the rest are counted


def load_prompts(path: Path) -> list[Prompt]:
    """JSON lines: {"id", "prompt", optional "class", "max_new_tokens", "phase"}, UTF-8, ids unique. The bad
    lines are named (the first few, then a count) in one error; nothing is half-loaded."""
    text = read_user_text(path, "prompts file")
    prompts, problems, first_line = [], [], {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        prompt = _parse_line(line)
        if isinstance(prompt, str):
            problems.append(f"line {number}: {prompt}")
            continue
        if prompt.id in first_line:  # figures and intervals are grouped by id: two prompts would merge
            problems.append(f"line {number}: id {prompt.id!r} is used again (line {first_line[prompt.id]})")
            continue
        first_line[prompt.id] = number
        prompts.append(prompt)
    if problems:
        more = f" (and {len(problems) - MAX_PROBLEMS} more bad lines)" if len(problems) > MAX_PROBLEMS else ""
        raise SpecmonError(f"prompts file {path}, {'; '.join(problems[:MAX_PROBLEMS])}{more}")
    if not prompts:
        raise SpecmonError(f"prompts file {path}: no prompts in it")
    return prompts


def _parse_line(line: str) -> Prompt | str:
    """One row, or what is wrong with it."""
    try:
        row = _ROW.decode(line)
    except msgspec.ValidationError as exc:  # `Expected `int`, got `bool` - at `$.max_new_tokens``
        reason, _, where = str(exc).partition(" - at `$")
        reason = reason.replace("Expected", "expected").replace("Object missing required field", "needs the field")
        return f"{where.strip('`.')}: {reason}" if where.strip("`.") else reason
    except msgspec.DecodeError as exc:
        if _LONE_SURROGATE.search(line):
            return "a lone UTF-16 surrogate escape (like \\ud800) is not text; remove it"
        return f"not JSON ({exc})"
    return Prompt(row.id, row.prompt, row.prompt_class, row.max_new_tokens, phase=row.phase)
