"""A session driven by a policy: each prompt is classified, decoded at the k the policy plans
round by round, and its rounds become the evidence for the class's next decision.

`PolicyScheduler.decode_steps` is the one way a prompt is decoded under a policy: `run`, `serve`,
`bench policy` and `policy tune` all call it."""

from __future__ import annotations

import functools
import os
import time
from typing import Callable, Generator, Sequence

from specmon.engine.draft_len import MAX_DRAFT_LEN
from specmon.engine.drafters import Drafter, Proposal
from specmon.engine.driver import UNCHECKED, Decoded, SessionDriver
from specmon.engine.rounds import drain
from specmon.engine.prompts import Prompt
from specmon.events.schema import PolicyLoaded, RoundVerified, Sampling
from specmon.policy import gate
from specmon.policy.engine import PolicyEngine
from specmon.policy.reload import loaded_event, print_reload


POLL_S = 0.25  # how often a prompt's start looks at the policy file: one stat, not one per prompt of a fast set


def policy_poll_s() -> float:
    """Seconds between looks at the policy file: SPECMON_POLICY_POLL_S (0: every prompt), else POLL_S."""
    try:
        value = float(os.environ.get("SPECMON_POLICY_POLL_S", POLL_S))
    except ValueError:
        return POLL_S
    return value if 0.0 <= value < float("inf") else POLL_S


class GatedDrafter:
    """The class's decision in force, for one prompt's round loop: each round's k (a decision mid-prompt counts at
    once), and the drafter with each proposal cut to the tokens the decision verifies; a draft cut whole is logged
    as `cut` and checked against the tokens the prompt emits next (gate.Shadow)."""

    max_draft_len = MAX_DRAFT_LEN  # a reload may raise k for the next prompt: the cache must have room for any

    def __init__(self, drafter: Drafter, engine: PolicyEngine, prompt_class: str):
        self.drafter, self.engine, self.prompt_class = drafter, engine, prompt_class
        self.name = getattr(drafter, "name", "none")
        self.spent_ms = 0.0  # the cuts' own time: policy work
        self.shadows = gate.Shadows()  # this decode's: one prompt's

    def next_draft_len(self) -> int:
        return self.engine.draft_len(self.prompt_class)

    def begin(self, prompt) -> None:
        self.drafter.begin(prompt)

    def propose(self, context, k, sampling, rng) -> Proposal:
        proposal = self.drafter.propose(context, k, sampling, rng)
        started = time.perf_counter()
        keep, explored = self.engine.cut(self.prompt_class, proposal.matched, len(proposal.tokens))
        self.spent_ms += (time.perf_counter() - started) * 1e3
        if keep == len(proposal.tokens) and not explored:
            return proposal
        q = proposal.q[:keep] if proposal.q is not None else None
        # a one-hot draft cut whole (n-gram; a model's when greedy) is checked against what is emitted instead
        checked = not keep and proposal.q is None and not self.shadows.pending
        cut = [int(t) for t in proposal.tokens] if checked else []
        return Proposal(proposal.tokens[:keep], q, proposal.matched, explored, cut)


class PolicyScheduler:
    def __init__(
        self,
        driver: SessionDriver,
        engine: PolicyEngine,
        drafter: Drafter,
        on_reload: Callable[[PolicyLoaded], None] | None = print_reload,
        poll_s: float | None = None,
    ):
        """`on_reload` hears of every hot reload, taken or refused (by default, one line on stderr)."""
        self.driver, self.engine, self.drafter = driver, engine, drafter
        self.on_reload = on_reload
        self.policy_ms = 0.0  # the policy's own work (classify, cut, observe, decide), for the benchmark
        self.poll_s = policy_poll_s() if poll_s is None else poll_s
        self._looked = -float("inf")  # perf_counter of the last look at the policy file
        driver.emit(loaded_event(engine.policy, driver.session_id, engine.in_force()))
        for decision in engine.opening:  # what earlier sessions learned, in force before the first round
            driver.emit(decision)

    def decode(self, prompt: Prompt, sampling: Sampling, max_new_tokens: int, **options) -> Decoded:
        """Classify, plan, decode and finish one prompt under the policy."""
        return drain(self.decode_steps(prompt, sampling, max_new_tokens, **options))

    def decode_steps(
        self,
        prompt: Prompt,
        sampling: Sampling,
        max_new_tokens: int,
        driver: SessionDriver | None = None,
        drafter: Drafter | None = None,
        *,
        named: str | None = None,
        on_round: Callable[[RoundVerified], None] | None = None,
        stop: Callable[[], str | None] | None = None,
    ) -> Generator[int, None, Decoded]:
        """decode() one round at a time (it yields after each round), on `driver` and `drafter` (a fork's, so
        decodes can take turns) or the scheduler's own; `named` is a class the request names, `stop` may end it."""
        driver, drafter = driver or self.driver, drafter or self.drafter
        started = time.perf_counter()
        self.look(driver)  # a prompt is classified, planned and drafted by one policy: the one in force now
        tag = prompt.prompt_class if prompt.prompt_class != "default" else None
        name, rule = self.engine.classify(prompt.text, tag, named)
        self.configure_drafter(name, drafter)  # every prompt: a class's settings never carry into another's
        k = self.engine.draft_len(name)
        self.policy_ms += (time.perf_counter() - started) * 1e3
        gated = GatedDrafter(drafter, self.engine, name)
        done = yield from driver.decode_steps(
            prompt,
            gated,
            gated,  # the draft length too: each round's k, as the decision in force asks it
            sampling,
            max_new_tokens,
            prompt_class=name,
            class_rule=rule,
            start_draft_len=k,
            on_round=functools.partial(self._observe, driver, on_round, gated.shadows),
            stop=stop,
        )
        self.policy_ms += gated.spent_ms
        for decision in self.engine.close(gated.shadows, prompt.id):
            driver.emit(decision)
        driver.finish(done, UNCHECKED)
        driver.sample_resources()
        self.engine.remember()  # as the session goes: a crash loses at most KEEP_EVERY_S of learning
        return done

    def configure_drafter(self, name: str, drafter: Drafter | None = None) -> None:
        """The class's n-gram setting for this prompt's rounds (none: the drafter's plain lookup)."""
        confident = getattr(drafter or self.drafter, "confident", None)
        if confident is not None:
            auto = self.engine.policy.class_named(name).speculate == "auto"
            confident(*((gate.MIN_MATCH, 1, True) if auto else (0,)))  # auto: whole drafts, which the table cuts

    def run(
        self,
        prompts: Sequence[Prompt],
        sampling: Sampling,
        max_new_tokens: int,
        on_prompt: Callable[[int], None] | None = None,
    ) -> None:
        self.driver.check_room(prompts, max_new_tokens, GatedDrafter.max_draft_len)
        try:
            for index, prompt in enumerate(prompts):
                self.decode(prompt, sampling, max_new_tokens)
                if on_prompt:
                    on_prompt(index + 1)
        finally:
            self.engine.remember(final=True)

    def _observe(
        self, driver: SessionDriver, then: Callable | None, shadows: gate.Shadows, event: RoundVerified
    ) -> None:
        """Each round: to the policy (its decisions take effect from the next round), then to `then`."""
        started = time.perf_counter()
        decisions = self.engine.observe(event, shadows)  # a plain step too: it earns the class's exploration budget
        self.policy_ms += (time.perf_counter() - started) * 1e3
        for decision in decisions:
            driver.emit(decision)
        if then is not None:
            then(event)

    def look(self, driver: SessionDriver | None = None, now: float | None = None) -> None:
        """Between prompts (or while a server idles): pick up an edit of the policy file once
        poll_s has passed (0: every time)."""
        now = time.perf_counter() if now is None else now
        if self.poll_s and now - self._looked < self.poll_s:
            return
        self._looked = now
        reloaded = self.engine.maybe_reload()
        if reloaded is not None:
            (driver or self.driver).emit(reloaded)
            if self.on_reload:
                self.on_reload(reloaded)
