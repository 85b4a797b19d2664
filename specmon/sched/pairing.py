"""`specmon run`: each prompt decoded plainly (k = 0) and with the drafter, alternating which
goes first so that drift in the machine's speed falls on both equally."""

from __future__ import annotations

from typing import Callable, Sequence

from specmon.engine.draft_len import FixedDraftLen
from specmon.engine.drafters import Drafter, NoDrafter
from specmon.engine.driver import UNCHECKED, SessionDriver
from specmon.engine.prompts import Prompt
from specmon.events.schema import Sampling
from specmon.sched.turns import rotated


def run_paired(
    driver: SessionDriver,
    prompts: Sequence[Prompt],
    drafter: Drafter,
    draft_len: int,
    sampling: Sampling,
    max_new_tokens: int,
    on_prompt: Callable[[int], None] | None = None,
) -> None:
    driver.check_room(prompts, max_new_tokens, draft_len)
    plain = NoDrafter()
    for index, prompt in enumerate(prompts):
        order = rotated([(plain, 0), (drafter, draft_len)] if draft_len else [(plain, 0)], index)
        runs = {}
        for which, k in order:
            if not driver.stopped:  # a cancelled first decode still gets its PromptFinished below
                runs[k] = driver.decode(prompt, which, FixedDraftLen(k), sampling, max_new_tokens)
        for done in runs.values():  # finished after both, so plain can run second
            checked = 0 in runs and not driver.stopped  # a decode cut short is not plain's equal or not
            driver.finish(done, driver.equivalence(runs[0], done) if checked else UNCHECKED)
        driver.sample_resources()
        if on_prompt:
            on_prompt(index + 1)
