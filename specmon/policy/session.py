"""A session driven by a policy: each prompt is classified, decoded at the k the policy plans,
and its rounds become the evidence for the class's next decision."""

from __future__ import annotations

import itertools
import time
from typing import Callable, Sequence

from specmon.engine.drafters import Drafter
from specmon.engine.prompts import Prompt
from specmon.engine.rounds import RoundContext, decode_prompt
from specmon.engine.session import RunSettings, Tokenizer
from specmon.engine.target import Target
from specmon.events.schema import AnyEvent, Equivalence, PromptFinished, PromptStarted, RoundVerified
from specmon.policy.engine import PolicyEngine, Schedule, loaded_event


def run_policy_prompts(session_id: str, target: Target, drafter: Drafter, tokenizer: Tokenizer,
                       prompts: Sequence[Prompt], settings: RunSettings, engine: PolicyEngine,
                       emit: Callable[[AnyEvent], None], on_prompt: Callable[[int], None] | None = None) -> None:
    round_ids = itertools.count()
    emit(loaded_event(engine.policy, session_id))
    for index, prompt in enumerate(prompts):
        tag = prompt.prompt_class if prompt.prompt_class != "default" else None
        name, rule = engine.classify(prompt.text, tag)
        plan = engine.plan(name)
        schedule = Schedule(plan)
        tokens = tokenizer.encode_chat(prompt.text)
        limit = prompt.max_new_tokens or settings.max_new_tokens
        speculates = plan.k or (plan.lead and plan.lead[0])
        emit(PromptStarted(session_id=session_id, t=time.time(), prompt_id=prompt.id, prompt_class=name,
                           draft_len=plan.k, drafter=drafter.name if speculates else "none",
                           sampling=settings.sampling, prompt_tokens=len(tokens), max_new_tokens=limit,
                           class_rule=f"{rule}; {plan.describe()}"))
        ctx = RoundContext(session_id, prompt.id, name, round_ids, tokenizer.decode)
        run = decode_prompt(target, drafter, tokens, lambda: engine.round_k(name, schedule), settings.sampling,
                            limit, ctx, _round_sink(engine, name, schedule, emit))
        emit(PromptFinished(session_id=session_id, t=time.time(), prompt_id=prompt.id, prompt_class=name,
                            draft_len=plan.k, rounds=run.rounds, generated=run.generated,
                            text=tokenizer.decode(run.generated), stop_reason=run.stop_reason,
                            prefill_ms=run.prefill_ms, decode_ms=run.decode_ms,
                            equivalence=Equivalence("unchecked")))
        if on_prompt:
            on_prompt(index + 1)


def _round_sink(engine: PolicyEngine, name: str, schedule: Schedule,
                emit: Callable[[AnyEvent], None]) -> Callable[[AnyEvent], None]:
    """Each round: log it, feed it to the policy, pick up a policy edit, and decide when due
    (never inside a lead run, so a re-measure or probe is judged whole); the next round follows."""

    def emit_round(event: AnyEvent) -> None:
        emit(event)
        if not isinstance(event, RoundVerified):
            return
        engine.observe(event)
        reloaded = engine.maybe_reload()
        if reloaded is not None:
            emit(reloaded)
        decision = engine.decide_when_due(name, schedule)
        if decision is not None:
            emit(decision)

    return emit_round
