"""A request's class and its decode under the policy: the policy classifies the last user message
unless the request names a class (the body's `specmon_class`, or the X-Specmon-Class header),
matched by a class's `match.tag`, else by its name. Without a policy, the named class (or
"default") only labels the rounds, which run at the fixed k."""

from __future__ import annotations

import re
from typing import Callable

from specmon.engine.driver import Decoded
from specmon.engine.prompts import Prompt
from specmon.events.schema import RoundVerified, Sampling
from specmon.sched.policy import PolicyDraftLen, PolicyScheduler
from specmon.server.errors import ApiError

CLASS_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")  # as the policy's class names


class ServePolicy(PolicyScheduler):
    """The policy scheduler, taking prompts one request at a time with their class already found."""

    def classify(self, text: str, named: str | None) -> tuple[str, str]:
        """The named class (its match.tag, then its name) whatever the text says; else the policy's rules.
        Not the policy's first-match order for a name: a text rule of an earlier class must not shadow it."""
        if named is None:
            return self.engine.classify(text)
        policy = self.engine.policy  # read once: a reload may swap it meanwhile
        for i, cls in enumerate(policy.classes):
            if cls.match.tag and cls.match.tag == named:
                return cls.name, f"classes[{i}].match.tag (line {policy.line_of('classes', i, 'match', 'tag')})"
        for i, cls in enumerate(policy.classes):
            if cls.name == named:
                return named, f"named by the request (classes[{i}].name)"
        known = ", ".join(c.name for c in policy.classes)
        raise ApiError(400, f"specmon_class {_quoted(named)}: the policy has no class or match.tag of that name "
                       f"(classes: {known})", param="specmon_class", code="invalid_value")

    def decode_named(self, prompt: Prompt, name: str, rule: str, sampling: Sampling, max_new_tokens: int, *,
                     on_round: Callable[[RoundVerified], None], stop: Callable[[], str | None]) -> Decoded:
        """Plan, then decode at the policy's k round by round; each round feeds the policy, then the request."""
        self.look()  # a request is planned by the policy in force
        schedule = self.engine.start_prompt(name)
        plan = schedule.plan
        observe = self._after_round(schedule, self.driver)

        def both(event: RoundVerified) -> None:
            observe(event)
            on_round(event)

        return self.driver.decode(prompt, self.drafter, PolicyDraftLen(self.engine, name, schedule), sampling,
                                  max_new_tokens, prompt_class=name, class_rule=f"{rule}; {plan.describe()}",
                                  start_draft_len=plan.k, on_round=both, stop=stop)

    def state(self, name: str) -> tuple[bool, int]:
        st = self.engine.state(name)
        return st.speculate, st.k


def fixed_class(named: str | None, k: int) -> tuple[str, str]:
    """Without a policy: the named class as a label, or "default"."""
    if named is None:
        return "default", f"no policy; fixed k={k}"
    if not CLASS_NAME.match(named):
        raise ApiError(400, f"specmon_class {_quoted(named)}: a class name is 1 to 40 letters, digits, '-', '_' or '.'",
                       param="specmon_class", code="invalid_value")
    return named, f"named by the request; no policy, fixed k={k}"


def _quoted(name: str) -> str:
    """The name as the request gave it, escaped, and cut short: a refusal need not echo a megabyte."""
    return repr(name) if len(name) <= 60 else repr(name[:57]) + "..."
