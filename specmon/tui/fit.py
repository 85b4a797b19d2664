"""Fitting a title of parts to a width: each part has wordings, longest first, and a narrow title
moves parts to shorter ones in a set order. The live view's and the served view's titles share it."""

from __future__ import annotations


def joined_width(wordings: dict[str, str]) -> int:
    """The title's width: the parts that have words, joined by ` · `."""
    return len(" · ".join(word for word in wordings.values() if word))


def shortened(wordings: dict[str, list[str]], steps: tuple[str, ...], width: int) -> dict[str, str]:
    """Each part's wording: the longest, then, while the title is wider than `width`, each key of `steps`
    in turn moves its part to its next wording (a part has none left: the step is spent; "" leaves it out)."""
    step = dict.fromkeys(wordings, 0)
    chosen = lambda: {key: words[step[key]] for key, words in wordings.items()}  # noqa: E731
    for key in steps:
        if joined_width(chosen()) <= width:
            break
        if step.get(key, -1) + 1 < len(wordings.get(key, ())):
            step[key] += 1
    return chosen()
