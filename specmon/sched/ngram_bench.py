"""`specmon bench policy --confident`: the n-gram drafter's confidence test alone, the policy off.
Every prompt is decoded plainly, at fixed k with the plain lookup (last 3, then 2 tokens), and at
the same k with each confidence setting (min_match/min_seen), one right after the other in a
rotating order, so drift on a shared machine falls on all alike.

A setting drafts as the product does: past its match where the target's verify pass is padded to
more rows anyway. A setting ending in "c" stops at the match's length however the pass runs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

from specmon.engine.draft_len import FixedDraftLen
from specmon.engine.drafters import NgramDrafter, NoDrafter
from specmon.engine.driver import UNCHECKED, SessionDriver
from specmon.engine.prompts import Prompt
from specmon.errors import SpecmonError
from specmon.events.schema import RoundVerified, Sampling
from specmon.metrics.stats import RunStats

ALL = "ALL"  # the row over every class
SETTING = re.compile(r"(\d+)/(\d+)(c?)")


@dataclass(frozen=True)
class Setting:
    name: str
    k: int
    confidence: tuple[int, int] | None  # (min_match, min_seen); None: the plain lookup
    capped: bool  # drafts stop at the match's length, however the verify pass runs


def parse_settings(text: str, k: int) -> list[Setting]:
    """plain, the plain lookup at k, then each of --confident's settings at k."""
    settings = [Setting("plain", 0, None, True), Setting(f"lookup k={k}", k, None, True)]
    for part in (p.strip() for p in text.split(",")):
        found = SETTING.fullmatch(part)
        if not found or int(found.group(1)) < 1 or int(found.group(2)) < 1:
            raise SpecmonError(
                f"--confident {text!r}: expected settings like 2/1,3/1,2/1c (min_match/min_seen, "
                "each >= 1; a trailing c caps each draft at its match's length)"
            )
        confidence = (int(found.group(1)), int(found.group(2)))
        settings.append(Setting(f"conf {part} k={k}", k, confidence, bool(found.group(3))))
    return settings


def run_ngram_bench(
    driver: SessionDriver,
    ngram_sizes: Sequence[int],
    verify_rows,
    prompts: Sequence[Prompt],
    settings: Sequence[Setting],
    sampling: Sampling,
    max_new_tokens: int,
    on_prompt: Callable[[int], None] | None = None,
) -> dict[str, dict[str, RunStats]]:
    """stats[class or ALL][setting name]: every prompt decoded under every setting, in a rotating order."""
    capped, padded = NgramDrafter(ngram_sizes), NgramDrafter(ngram_sizes, verify_rows)
    stats: dict[str, dict[str, RunStats]] = {}
    for index, prompt in enumerate(prompts):
        shift = index % len(settings)
        for s in [*settings[shift:], *settings[:shift]]:
            drafter = capped if s.capped else padded
            drafter.confident(*s.confidence) if s.confidence else drafter.confident(0)
            into = [
                stats.setdefault(group, {}).setdefault(s.name, RunStats(s.k)) for group in (prompt.prompt_class, ALL)
            ]
            done = driver.decode(
                prompt,
                drafter if s.k else NoDrafter(),
                FixedDraftLen(s.k),
                sampling,
                max_new_tokens,
                on_round=_adder(into),
            )
            driver.finish(done, UNCHECKED)
        if on_prompt:
            on_prompt(index + 1)
    return stats


def _adder(into: list[RunStats]) -> Callable[[RoundVerified], None]:
    def add(event: RoundVerified) -> None:
        for stats in into:
            stats.add_round(event)

    return add
