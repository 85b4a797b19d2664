"""A session driven by a policy: each prompt is classified, decoded at the k the policy plans
round by round, and its rounds become the evidence for the class's next decision."""

from __future__ import annotations

import os
import time
from typing import Callable, Generator, Sequence

from specmon.engine.draft_len import MAX_DRAFT_LEN
from specmon.engine.drafters import Drafter
from specmon.engine.driver import UNCHECKED, Decoded, SessionDriver
from specmon.engine.rounds import drain
from specmon.engine.prompts import Prompt
from specmon.events.schema import PolicyLoaded, RoundVerified, Sampling
from specmon.policy.engine import PolicyEngine
from specmon.policy.plan import Schedule
from specmon.policy.reload import loaded_event, print_reload


POLL_S = 0.25  # how often a run looks at its policy file: inside a decode one stat a round cost ~0.35 ms (~1%)
POLL_ROUNDS = 8  # ... and at most every 8th round: a bench's lanes take turns, so its 0.25 s can be one round


def policy_poll_s() -> float:
    """Seconds between looks at the policy file: SPECMON_POLICY_POLL_S (0: every round), else POLL_S.
    A look comes at a prompt's start once that long has passed, and between rounds once POLL_ROUNDS
    rounds have passed as well."""
    try:
        value = float(os.environ.get("SPECMON_POLICY_POLL_S", POLL_S))
    except ValueError:
        return POLL_S
    return value if 0.0 <= value < float("inf") else POLL_S


class PolicyDraftLen:
    """k for each round of one prompt: its plan's lead run (re-measure or probe), else the class's
    current decision, which a decision mid-prompt or a reloaded policy changes at once."""

    max_draft_len = MAX_DRAFT_LEN  # a reload may raise k mid-prompt: the cache must have room for any

    def __init__(self, engine: PolicyEngine, prompt_class: str, schedule: Schedule):
        self.engine, self.prompt_class, self.schedule = engine, prompt_class, schedule

    def next_draft_len(self) -> int:
        return self.engine.round_k(self.prompt_class, self.schedule)


class PolicyScheduler:
    def __init__(self, driver: SessionDriver, engine: PolicyEngine, drafter: Drafter,
                 on_reload: Callable[[PolicyLoaded], None] | None = print_reload, poll_s: float | None = None):
        """`on_reload` hears of every hot reload, taken or refused (by default, one line on stderr)."""
        self.driver, self.engine, self.drafter = driver, engine, drafter
        self.on_reload = on_reload
        self.policy_ms = 0.0  # the policy's own work (classify, plan, observe, decide), for the benchmark
        self.poll_s = policy_poll_s() if poll_s is None else poll_s
        self._looked = -float("inf")  # perf_counter of the last look at the policy file
        self._unlooked = 0  # rounds since that look
        driver.emit(loaded_event(engine.policy, driver.session_id))

    def decode(self, prompt: Prompt, sampling: Sampling, max_new_tokens: int) -> Decoded:
        """Classify, plan, decode and finish one prompt under the policy."""
        return drain(self.decode_steps(prompt, sampling, max_new_tokens))

    def decode_steps(self, prompt: Prompt, sampling: Sampling, max_new_tokens: int,
                     driver: SessionDriver | None = None,
                     drafter: Drafter | None = None) -> Generator[int, None, Decoded]:
        """decode() one round at a time (it yields after each round), on `driver` and `drafter`
        (a fork's, so decodes can take turns) or the scheduler's own."""
        driver, drafter = driver or self.driver, drafter or self.drafter
        tag = prompt.prompt_class if prompt.prompt_class != "default" else None
        started = time.perf_counter()
        self.look(driver)  # a prompt is classified and planned by the policy in force
        name, rule = self.engine.classify(prompt.text, tag)
        schedule = self.engine.start_prompt(name, prompt.id)
        self.configure_drafter(name, drafter)
        self.policy_ms += (time.perf_counter() - started) * 1e3
        plan = schedule.plan
        done = yield from driver.decode_steps(
            prompt, drafter, PolicyDraftLen(self.engine, name, schedule), sampling, max_new_tokens,
            prompt_class=name, class_rule=f"{rule}; {plan.describe()}", start_draft_len=plan.k,
            on_round=self._after_round(schedule, driver, drafter))
        driver.finish(done, UNCHECKED)
        driver.sample_resources()
        return done

    def configure_drafter(self, name: str, drafter: Drafter | None = None, learned: bool = True) -> None:
        """The class's n-gram confidence (none: the drafter's plain lookup), for this prompt's rounds:
        with min_match as the policy raised it, or (not `learned`: a fixed-k run) as the file sets it."""
        confident = getattr(drafter or self.drafter, "confident", None)
        if confident is not None:
            confidence = self.engine.confidence(name, learned)
            confident(*confidence) if confidence else confident(0)

    def run(self, prompts: Sequence[Prompt], sampling: Sampling, max_new_tokens: int,
            on_prompt: Callable[[int], None] | None = None) -> None:
        self.driver.check_room(prompts, max_new_tokens, PolicyDraftLen.max_draft_len)
        for index, prompt in enumerate(prompts):
            self.decode(prompt, sampling, max_new_tokens)
            if on_prompt:
                on_prompt(index + 1)

    def _after_round(self, schedule: Schedule, driver: SessionDriver,
                     drafter: Drafter | None = None) -> Callable[[RoundVerified], None]:
        """Each round: pick up a policy edit, feed the round to the policy, and decide when due
        (never inside a lead run, so a re-measure or probe is judged whole); the next round follows."""

        engine, set_aside, clock = self.engine, self.engine.set_aside(), time.perf_counter
        granted, epoch, drafting = 0, -1, False  # rounds granted quiet (drafting: ones that drafted too), per epoch

        def observe(event: RoundVerified) -> None:
            nonlocal granted, epoch, drafting
            started = clock()
            if self._unlooked + 1 < POLL_ROUNDS and self.poll_s:
                self._unlooked += 1  # surely not due: the common round skips the call
            else:
                self._look(driver, started, every_round=True)  # a reload flushes: a new epoch
            if granted and engine.epoch == epoch and (drafting or not event.proposed):
                granted -= 1
                set_aside(event)  # as after_round would: no decision can come of it
                self.policy_ms += (clock() - started) * 1e3
                return
            decision = engine.after_round(event, schedule)
            (granted, drafting), epoch = engine.grant_quiet(event.prompt_class, schedule), engine.epoch
            self.policy_ms += (clock() - started) * 1e3
            if decision is not None:
                driver.emit(decision)
                if decision.match_to and decision.applied:
                    self.configure_drafter(event.prompt_class, drafter)  # a raised min_match drafts from the next round

        return observe

    def look(self, driver: SessionDriver | None = None) -> None:
        """At a prompt's start: pick up an edit of the policy file once poll_s has passed."""
        self._look(driver or self.driver, time.perf_counter(), every_round=False)

    def _look(self, driver: SessionDriver, now: float, every_round: bool) -> None:
        """Pick up an edit of the policy file: at a prompt's start once poll_s has passed, between
        rounds only every POLL_ROUNDS rounds as well (poll_s = 0: every time)."""
        self._unlooked += every_round
        due = now - self._looked >= self.poll_s and (not every_round or self._unlooked >= POLL_ROUNDS)
        if not (due or self.poll_s == 0):
            return
        self._looked, self._unlooked = now, 0
        reloaded = self.engine.maybe_reload()
        if reloaded is not None:
            driver.emit(reloaded)
            if self.on_reload:
                self.on_reload(reloaded)
