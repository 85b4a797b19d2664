"""Hot reload's edges: when the policy file changed and what an edit changed (PolicyWatch), and the
events and lines that report a reload taken or refused. What a session drops of what it learned is
its own to decide (policy.engine and proxy.routing maybe_reload)."""

from __future__ import annotations

import sys
import time

from dataclasses import dataclass
from pathlib import Path

from specmon.text import line_width, wrapped_lines
from specmon.errors import SpecmonError
from specmon.events.schema import ClassInForce, PolicyLoaded
from specmon.policy.schema import MAX_POLICY_BYTES, Policy, file_stamp, load_policy


def loaded_event(
    policy: Policy, session_id: str, classes: list[ClassInForce] | None = None, changed: list[str] | None = None
) -> PolicyLoaded:
    return PolicyLoaded(
        session_id=session_id,
        t=time.time(),
        source=policy.source,
        sha256=policy.sha256,
        text=policy.text,
        accepted=True,
        classes=classes or [],
        changed=changed or [],
    )


SECTIONS = {"policy": "settings", "routing": "routing"}  # a policy file's [section]: the Policy's field


@dataclass(frozen=True)
class Edit:
    """A valid edit of the policy file: the policy now, the classes it changed or removed (by name), and
    the sections every class runs by that it changed ("policy", "routing")."""

    policy: Policy
    classes: list[str]
    sections: list[str]


class PolicyWatch:
    """The file a session's policy came from, looked at between prompts or requests: None while it is as
    last seen, then the Edit, or the event refusing it (a reload never ends the session)."""

    def __init__(self, policy: Policy):
        self.stamp = policy.stamp if policy.stamp is not None else file_stamp(policy.source)

    def edit(self, policy: Policy, session_id: str) -> Edit | PolicyLoaded | None:
        stamp = file_stamp(policy.source)
        if stamp == self.stamp:
            return None
        self.stamp = stamp
        try:
            new = load_policy(Path(policy.source))
        except SpecmonError as exc:
            return refused_event(policy.source, session_id, str(exc))
        except Exception as exc:  # noqa: BLE001 - the promise: a reload never ends the run
            return refused_event(policy.source, session_id, f"{policy.source}: cannot load it ({exc!r})")
        sections = [name for name, field in SECTIONS.items() if getattr(policy, field) != getattr(new, field)]
        before, kept = {c.name: c for c in policy.classes}, {c.name for c in new.classes}
        changed = [c.name for c in new.classes if before.get(c.name) != c] + [n for n in before if n not in kept]
        return Edit(new, changed, sections)


def refused_event(source: str, session_id: str, error: str) -> PolicyLoaded:
    """The refusal, with what the file held (as far as it reads as text)."""
    try:
        with open(source, "rb") as fh:
            text = fh.read(MAX_POLICY_BYTES).decode("utf-8", "replace")
    except OSError:
        text = ""
    return PolicyLoaded(
        session_id=session_id, t=time.time(), source=source, sha256="", text=text, accepted=False, error=error
    )


def print_reload(event: PolicyLoaded) -> None:
    """One line for a reload, for a run without the TUI (which shows it in its decisions pane), on stderr,
    looked up at each call: under the TUI, Textual redirects it off the screen. A message, not a record:
    wrapped at words to a terminal with a hanging indent, whole when piped."""
    if event.accepted:
        changed = ", ".join(event.changed) or "nothing the classes run by"
        line = (
            f"specmon: policy reloaded from {event.source} (sha256 {event.sha256[:12]}); changed: {changed}; "
            "each class runs by it from its next prompt"
        )
    else:
        error = " ".join(event.error.splitlines())
        line = f"specmon: policy edit refused, the previous policy stays in force: {error}"
    width = line_width(sys.stderr)
    for part in wrapped_lines(line, width) if width else [line]:
        print(part, file=sys.stderr, flush=True)
