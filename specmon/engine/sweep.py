"""`specmon sweep`: per class, a grid of draft lengths × sampling settings × drafters, with plain
decoding (k = 0) in every grid and interleaved with the rest, prompt by prompt."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from specmon.engine.drafters import Drafter, NoDrafter
from specmon.engine.equivalence import compare
from specmon.engine.prompts import Prompt
from specmon.engine.rounds import PromptRun, RoundContext, decode_prompt
from specmon.engine.session import Tokenizer
from specmon.engine.target import Target
from specmon.events.schema import AnyEvent, Equivalence, PromptFinished, PromptStarted, Sampling


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


def run_sweep(session_id: str, target: Target, drafters: dict[str, Drafter], tokenizer: Tokenizer,
              prompts: Sequence[Prompt], cells: list[Cell], max_new_tokens: int, near_tie_margin: float,
              emit: Callable[[AnyEvent], None], on_run: Callable[[], None] | None = None) -> None:
    """Each prompt runs every cell, in an order rotated from prompt to prompt so drift cancels.
    Every round is emitted as it happens, so an interrupted sweep keeps all it finished."""
    round_ids = itertools.count()
    drafters = {**drafters, "none": NoDrafter()}
    for index, prompt in enumerate(prompts):
        tokens = tokenizer.encode_chat(prompt.text)
        limit = prompt.max_new_tokens or max_new_tokens
        shift = index % len(cells)
        runs: dict[Cell, PromptRun] = {}
        for cell in cells[shift:] + cells[:shift]:
            runs[cell] = _decode(session_id, target, drafters[cell.drafter], tokens, prompt, cell, limit,
                                 round_ids, tokenizer, emit)
            if on_run:
                on_run()
        for cell, run in runs.items():  # finishes after all cells, so plain can run in any position
            base = runs[Cell("none", 0, cell.sampling)]
            verdict = Equivalence("baseline") if cell.draft_len == 0 else compare(
                base.generated, base.margins, run.generated, cell.sampling.greedy, near_tie_margin)
            emit(PromptFinished(session_id=session_id, t=time.time(), prompt_id=prompt.id,
                                prompt_class=prompt.prompt_class, draft_len=cell.draft_len, rounds=run.rounds,
                                generated=run.generated, text=tokenizer.decode(run.generated),
                                stop_reason=run.stop_reason, prefill_ms=run.prefill_ms, decode_ms=run.decode_ms,
                                equivalence=verdict, drafter=cell.drafter, sampling=cell.sampling))


def _decode(session_id, target, drafter, tokens, prompt, cell: Cell, limit, round_ids, tokenizer, emit) -> PromptRun:
    emit(PromptStarted(session_id=session_id, t=time.time(), prompt_id=prompt.id, prompt_class=prompt.prompt_class,
                       draft_len=cell.draft_len, drafter=cell.drafter, sampling=cell.sampling,
                       prompt_tokens=len(tokens), max_new_tokens=limit, class_rule="sweep"))
    ctx = RoundContext(session_id, prompt.id, prompt.prompt_class, round_ids, tokenizer.decode)
    return decode_prompt(target, drafter, tokens, cell.draft_len, cell.sampling, limit, ctx, emit)
