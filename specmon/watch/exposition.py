"""Reading a server's /metrics page (Prometheus text): whose names it uses, and the speculative
counters summed over every label set but the draft position (vLLM labels by engine and model,
specmon serve by class and k: the server's totals are their sums)."""

from __future__ import annotations

import math

from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

KINDS = ("llama-server", "vllm", "specmon")


@dataclass(frozen=True)
class Names:
    """One server's metric names (samples as exposed, a counter's `_total` included)."""

    prefix: str
    generation_tokens: str
    running: str
    waiting: str
    drafts: str = "spec_decode_num_drafts_total"
    draft_tokens: str = "spec_decode_num_draft_tokens_total"
    accepted: str = "spec_decode_num_accepted_tokens_total"
    accepted_per_pos: str = "spec_decode_num_accepted_tokens_per_pos_total"


NAMES = {
    "llama-server": Names("llamacpp:", "tokens_predicted_total", "requests_processing", "requests_deferred"),
    "vllm": Names("vllm:", "generation_tokens_total", "num_requests_running", "num_requests_waiting"),
    # the target's verdicts (log info's accepted), not what a stop string left sent: the session's own acceptance
    "specmon": Names(
        "specmon_",
        "generation_tokens_total",
        "requests_running",
        "queue_depth",
        accepted="spec_decode_num_verified_accepted_tokens_total",
    ),
}


class NotMetrics(ValueError):
    """The page is not Prometheus text exposition."""


@dataclass
class Reading:
    """One page's figures under one kind's names; None where the page does not have the metric."""

    kind: str
    drafts: int | None = None
    draft_tokens: int | None = None
    accepted: int | None = None
    accepted_per_pos: list[int] = field(default_factory=list)
    generation_tokens: int | None = None
    running: int | None = None
    waiting: int | None = None


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)], every family's samples as the page exposes them."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out.setdefault(sample.name, []).append((sample.labels, sample.value))
    except (ValueError, IndexError, KeyError) as exc:  # the parser's ways of saying "not exposition text"
        raise NotMetrics(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    return out


def detect_kind(text: str) -> str | None:
    """Whose /metrics this is, from its names: "llama-server", "vllm", "specmon", or None."""
    try:
        names = samples(text)
    except NotMetrics:
        return None
    return kind_of(names)


def kind_of(names: dict) -> str | None:
    """The kind whose speculative counters the page has; else the kind any of its names belong to."""
    speculating = next((kind for kind, n in NAMES.items() if n.prefix + n.drafts in names), None)
    return speculating or next((kind for kind, n in NAMES.items() if any(x.startswith(n.prefix) for x in names)), None)


def read(names: dict[str, list[tuple[dict[str, str], float]]], kind: str) -> Reading:
    """The figures of `kind` on a parsed page (samples())."""
    n = NAMES[kind]

    def summed(name: str) -> int | None:
        found = names.get(n.prefix + name)
        return None if found is None else round(finite(n.prefix + name, sum(value for _, value in found)))

    return Reading(
        kind=kind,
        drafts=summed(n.drafts),
        draft_tokens=summed(n.draft_tokens),
        accepted=summed(n.accepted),
        accepted_per_pos=per_position(names.get(n.prefix + n.accepted_per_pos, [])),
        generation_tokens=summed(n.generation_tokens),
        running=summed(n.running),
        waiting=summed(n.waiting),
    )


def per_position(found: list[tuple[dict[str, str], float]]) -> list[int]:
    """Counts by draft position 0, 1, ... (summed over the other labels; a position not listed is 0)."""
    by_pos: dict[int, float] = {}
    for labels, value in found:
        position = labels.get("position")
        if position is not None and position.isdigit():
            by_pos[int(position)] = by_pos.get(int(position), 0.0) + value
    return [round(finite("per position", by_pos.get(i, 0.0))) for i in range(max(by_pos) + 1)] if by_pos else []


def finite(name: str, value: float) -> float:
    """A figure we count with: NaN or Inf there is a failed read (a gauge we do not read may be NaN)."""
    if not math.isfinite(value):
        raise NotMetrics(f"{name} is {value}")
    return value
