"""The report's policy section: what each decision changed, and each policy loaded, reloaded or
refused, in log order, with the round count each came after."""

from __future__ import annotations

from specmon.events.schema import Decision, PolicyLoaded, RoundVerified
from specmon.policy.explain import what_changed
from specmon.policy.route import cited_words


def policy_history(events) -> list[dict]:
    """Decisions and policy loads as they happened; `after_round`: rounds logged before each."""
    history, rounds, loads = [], 0, 0
    for ev in events:
        if isinstance(ev, RoundVerified):
            rounds += 1
        elif isinstance(ev, Decision):
            history.append(_decision(ev, rounds))
        elif isinstance(ev, PolicyLoaded):
            history.append(_load(ev, rounds, first=not loads))
            loads += ev.accepted
    return history


def _decision(d: Decision, rounds: int) -> dict:
    cited = cited_words(d.request_ids, d.route.recalled) if d.route is not None else f"{len(d.round_ids)} rounds"
    return {
        "kind": "decision",
        "id": d.decision_id,
        "class": d.prompt_class,
        "change": what_changed(d),
        "applied": d.applied,
        "rule": d.rule_key,
        "cited": cited,
        "after_round": rounds,
    }


def _load(p: PolicyLoaded, rounds: int, first: bool) -> dict:
    kind = "refused" if not p.accepted else "loaded" if first else "reloaded"
    return {
        "kind": kind,
        "policy": p.sha256[:8],
        "changed": list(p.changed),
        "error": p.error.splitlines()[0] if p.error else "",
        "after_round": rounds,
    }


def policy_markdown(history: list[dict]) -> list[str]:
    """A list item per entry (class names are 1-40 of A-Za-z0-9_.-; a refusal's text goes as the log has it)."""
    if not history:
        return []
    return ["", "## Policy", "", *(f"- after round {h['after_round']}: {_words(h)}" for h in history)]


def _words(h: dict) -> str:
    if h["kind"] == "decision":
        advised = "" if h["applied"] else " (advised, not applied)"
        return f"d{h['id']} [{h['class']}] {h['change']}{advised}, by {h['rule']} from {h['cited']}"
    if h["kind"] == "refused":
        return f"an edit refused, the policy in force kept: {h['error']}"
    if h["kind"] == "loaded":
        return f"policy {h['policy']} in force"
    return f"policy {h['policy']} reloaded; it changed {', '.join(h['changed']) or 'nothing'}"
