"""`specmon sweep`: per class, a grid of draft lengths × sampling settings × drafters, with plain
decoding (k = 0) in every grid and interleaved with the rest, prompt by prompt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from specmon.engine.draft_len import FixedDraftLen
from specmon.engine.drafters import Drafter, NoDrafter
from specmon.engine.driver import SessionDriver
from specmon.engine.prompts import Prompt
from specmon.engine.rounds import drain
from specmon.events.schema import Sampling
from specmon.sched.turns import Lane, lanes, rotated, take_turns


@dataclass(frozen=True)
class Cell:
    drafter: str  # "none" for plain decoding
    draft_len: int
    sampling: Sampling


def grid(drafters: Sequence[str], ks: Sequence[int], samplings: Sequence[Sampling]) -> list[Cell]:
    """Every (drafter, k) under every sampling setting, plus one plain cell per sampling setting."""
    arms = [("none", 0), *((d, k) for d in drafters for k in ks if k > 0)]
    return [Cell(drafter, k, sampling) for sampling in samplings for drafter, k in arms]


LANE_BYTES = 4 << 30  # KV-cache copies a prompt's cells may take to decode in turn; above it, one by one


def run_sweep(
    driver: SessionDriver,
    drafters: dict[str, Drafter],
    prompts: Sequence[Prompt],
    cells: list[Cell],
    max_new_tokens: int,
    on_run: Callable[[int], None] | None = None,
) -> None:
    """Each prompt runs every cell, in an order rotated from prompt to prompt: in turns on lanes where
    their copies fit LANE_BYTES (turns.py), else one after another; `on_run(n)` counts prompt x cell runs."""
    driver.check_room(prompts, max_new_tokens, max(cell.draft_len for cell in cells))
    drafters = {**drafters, "none": NoDrafter()}
    lanes = _lanes(driver, drafters, cells)
    finished, ran = 0, on_run or (lambda n: None)
    for index, prompt in enumerate(prompts):
        order = rotated(cells, index)
        # each cell's lane, or without lanes the session's own driver (a Lane that never holds an event)
        arms = {cell: lanes[cell] if lanes else Lane(driver, drafters[cell.drafter]) for cell in order}
        decodes = [
            arm.driver.decode_steps(
                prompt, arm.drafter, FixedDraftLen(cell.draft_len), cell.sampling, max_new_tokens, class_rule="sweep"
            )
            for cell, arm in arms.items()
        ]
        if lanes is None:
            done = []
            for decode in decodes:  # one after another, each told as it ends
                done.append(drain(decode))
                ran(finished + len(done))
        else:
            done = take_turns(decodes)
        runs = dict(zip(order, done))
        for cell, arm in arms.items():  # finishes after all cells, so plain can run in any position
            arm.driver.finish(runs[cell], driver.equivalence(runs[Cell("none", 0, cell.sampling)], runs[cell]))
            arm.flush(driver.emit)  # a lane's events, held until the prompt's decodes are all done
        finished += len(order)
        if lanes is not None:
            ran(finished)
        driver.sample_resources()


def _lanes(driver: SessionDriver, drafters: dict[str, Drafter], cells: list[Cell]) -> dict[Cell, Lane] | None:
    """A lane per cell, when the copies of the KV caches (target's and draft model's) fit LANE_BYTES."""
    target = sum(driver.target.cache_bytes().values())
    drafts = sum(sum(getattr(drafters[cell.drafter], "cache_bytes", dict)().values()) for cell in cells)
    if target * len(cells) + drafts > LANE_BYTES:
        return None
    made = lanes(driver, [drafters[cell.drafter] for cell in cells])
    return None if made is None else dict(zip(cells, made))
