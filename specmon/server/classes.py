"""A request's class: the policy classifies the last user message unless the request names a class
(the body's `specmon_class`, or the X-Specmon-Class header), matched by a class's `match.tag`, else
by its name. Without a policy, the named class (or "default") only labels the rounds, which run
at the fixed k. With one, admission only checks the name: the decode classifies the request again
under the policy in force when its turn comes (PolicyScheduler.decode_steps), so it is classified
and decoded by one policy."""

from __future__ import annotations

import re

from specmon.policy.classify import UnknownClass
from specmon.sched.policy import PolicyScheduler
from specmon.server.errors import ApiError

CLASS_NAME = re.compile(r"[A-Za-z0-9_.-]{1,40}\Z")  # as the policy's class names; \Z: no trailing newline


def policy_class(policy: PolicyScheduler, text: str, named: str | None) -> tuple[str, str]:
    """Admission's check of a request's class under the policy in force: 400 for a name it lacks."""
    if named is not None:
        check_name(named)  # a malformed name is told the rule, not that no class has it
    try:
        return policy.engine.classify(text, None, named)
    except UnknownClass as exc:
        raise unknown_class(exc) from None


def unknown_class(exc: UnknownClass) -> ApiError:
    return ApiError(400, str(exc), param="specmon_class", code="invalid_value")


def fixed_class(k: int, text: str, named: str | None) -> tuple[str, str]:
    """Without a policy: the named class as a label, or "default" (the text is not read)."""
    if named is None:
        return "default", f"no policy; fixed k={k}"
    check_name(named)
    return named, f"named by the request; no policy, fixed k={k}"


def check_name(named: str) -> None:
    """400 for a name no class could have: 1 to 40 of `A-Za-z0-9_.-`, as the policy's class names."""
    if not CLASS_NAME.match(named):
        quoted = repr(named) if len(named) <= 60 else repr(named[:57]) + "..."  # a refusal need not echo a megabyte
        raise ApiError(
            400,
            f"specmon_class {quoted}: a class name is 1 to 40 letters, digits, '-', '_' or '.'",
            param="specmon_class",
            code="invalid_value",
        )
