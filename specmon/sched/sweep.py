"""`specmon sweep`: per class, a grid of draft lengths × sampling settings × drafters, with plain
decoding (k = 0) in every grid and interleaved with the rest, prompt by prompt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from specmon.engine.draft_len import FixedDraftLen
from specmon.engine.drafters import Drafter, NoDrafter
from specmon.engine.driver import Decoded, SessionDriver
from specmon.engine.prompts import Prompt
from specmon.events.schema import Sampling


@dataclass(frozen=True)
class Cell:
    drafter: str  # "none" for plain decoding
    draft_len: int
    sampling: Sampling


def grid(drafters: Sequence[str], ks: Sequence[int], samplings: Sequence[Sampling]) -> list[Cell]:
    """Every (drafter, k) under every sampling setting, plus one plain cell per sampling setting."""
    cells = []
    for sampling in samplings:
        cells.append(Cell("none", 0, sampling))
        cells.extend(Cell(d, k, sampling) for d in drafters for k in ks if k > 0)
    return cells


def run_sweep(driver: SessionDriver, drafters: dict[str, Drafter], prompts: Sequence[Prompt], cells: list[Cell],
              max_new_tokens: int, on_run: Callable[[int], None] | None = None) -> None:
    """Each prompt runs every cell, in an order rotated from prompt to prompt so drift cancels.
    Every round is emitted as it happens, so an interrupted sweep keeps all it finished;
    `on_run(n)` is told after each of the prompt x cell runs."""
    driver.check_room(prompts, max_new_tokens, max(cell.draft_len for cell in cells))
    drafters = {**drafters, "none": NoDrafter()}
    finished = 0
    for index, prompt in enumerate(prompts):
        shift = index % len(cells)
        runs: dict[Cell, Decoded] = {}
        for cell in cells[shift:] + cells[:shift]:
            runs[cell] = driver.decode(prompt, drafters[cell.drafter], FixedDraftLen(cell.draft_len), cell.sampling,
                                       max_new_tokens, class_rule="sweep")
            finished += 1
            if on_run:
                on_run(finished)
        for cell, done in runs.items():  # finishes after all cells, so plain can run in any position
            driver.finish(done, driver.equivalence(runs[Cell("none", 0, cell.sampling)], done))
        driver.sample_resources()
