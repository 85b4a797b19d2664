"""Prompt sets: the built-in suite (five classes, four prompts each) or JSON lines from a file."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from specmon.errors import SpecmonError


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str
    prompt_class: str
    max_new_tokens: int | None = None


_CODE = '''def moving_average(values, window):
    result = []
    for i in range(len(values)):
        chunk = values[max(0, i - window + 1): i + 1]
        result.append(sum(chunk) / len(chunk))
    return result'''

_PASSAGE = ("The city council met on Tuesday to discuss the new bicycle lanes. Several residents said the "
            "lanes made the street safer for children walking to school. Shop owners worried that the loss "
            "of parking spaces would reduce the number of customers. The council agreed to review traffic "
            "and sales figures after six months before making the lanes permanent.")

SUITE: dict[str, list[str]] = {
    "chat": [
        "What are three good habits for getting better sleep?",
        "Why is the sky blue? Explain it simply.",
        "Give me some ideas for a birthday party for a ten year old.",
        "What should I pack for a weekend hiking trip?",
    ],
    "code-new": [
        "Write a Python function that checks whether a number is prime.",
        "Write a Python function that reverses the words in a sentence.",
        "Write a JavaScript function that returns the largest number in an array.",
        "Write a Python class for a simple stack with push, pop and peek.",
    ],
    "code-edit": [
        f"Add type hints to this function and return the same code:\n\n{_CODE}",
        f"Rename the variable `chunk` to `window_values` in this code:\n\n{_CODE}",
        f"Add a docstring to this function and return the full code:\n\n{_CODE}",
        "Change this function so it uses a list comprehension:\n\n"
        "def squares(numbers):\n    out = []\n    for n in numbers:\n        out.append(n * n)\n    return out",
    ],
    "rewrite": [
        f"Summarize this passage in two sentences:\n\n{_PASSAGE}",
        f"Rewrite this passage in simpler words:\n\n{_PASSAGE}",
        f"Rewrite this passage in the past tense, keeping every detail:\n\n{_PASSAGE}",
        "Fix the grammar in this text and return it: \"Me and my friend goes to the market every "
        "saturdays, we buys apples and bread and then we walks home together.\"",
    ],
    "non-english": [
        "Quelle est la capitale de la France et pourquoi est-elle célèbre ?",
        "¿Cuáles son los beneficios de beber agua todos los días?",
        "Was ist der Unterschied zwischen einem Hund und einer Katze?",
        "Qual é a melhor maneira de aprender uma nova língua?",
    ],
}


def builtin_suite(classes: list[str] | None = None) -> list[Prompt]:
    unknown = set(classes or []) - set(SUITE)
    if unknown:
        raise SpecmonError(f"unknown built-in class {sorted(unknown)[0]!r}; built-in classes: {', '.join(SUITE)}")
    return [Prompt(f"{name}-{i}", text, name)
            for name, texts in SUITE.items() if not classes or name in classes
            for i, text in enumerate(texts)]


def load_prompts(path: Path) -> list[Prompt]:
    """JSON lines: {"id", "prompt", optional "class", optional "max_new_tokens"}."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise SpecmonError(f"prompts file {path}: cannot read it ({exc.strerror})") from None
    prompts = [_parse_line(path, number, line) for number, line in enumerate(lines, 1) if line.strip()]
    if not prompts:
        raise SpecmonError(f"prompts file {path}: no prompts in it")
    return prompts


def _parse_line(path: Path, number: int, line: str) -> Prompt:
    where = f"prompts file {path}, line {number}"
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise SpecmonError(f"{where}: not JSON ({exc.msg})") from None
    if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or "id" not in row:
        raise SpecmonError(f"{where}: needs an object with \"id\" and a string \"prompt\"")
    limit = row.get("max_new_tokens")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise SpecmonError(f"{where}: max_new_tokens must be a positive integer")
    return Prompt(str(row["id"]), row["prompt"], str(row.get("class", "default")), limit)
