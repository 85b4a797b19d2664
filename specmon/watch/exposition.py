"""Reading a server's /metrics page (Prometheus text): whose names it uses, and the speculative
counters summed over every label set but the draft position (vLLM labels by engine and model,
specmon serve by class and k: the server's totals are their sums)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from specmon.events.schema import ServerScraped


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


Samples = dict[str, list[tuple[dict[str, str], float]]]  # sample name -> [(labels, value)]


class NotMetrics(ValueError):
    """The page is not Prometheus text exposition."""


def samples(text: str) -> Samples:
    """Every family's samples as the page exposes them."""
    out: Samples = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out.setdefault(sample.name, []).append((sample.labels, sample.value))
    except (ValueError, IndexError, KeyError) as exc:  # the parser's ways of saying "not exposition text"
        raise NotMetrics(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    return out


def kind_of(names: Samples) -> str | None:
    """The kind whose speculative counters the page has; else the kind any of its names belong to."""
    speculating = next((kind for kind, n in NAMES.items() if n.prefix + n.drafts in names), None)
    return speculating or next((kind for kind, n in NAMES.items() if any(x.startswith(n.prefix) for x in names)), None)


def read(names: Samples, kind: str, session_id: str = "", t: float = 0.0, url: str = "") -> ServerScraped:
    """The figures of `kind` on a parsed page (samples()), as a read of `url`; None where the page lacks one."""
    n, sums = NAMES[kind], {}
    for figure in ("drafts", "draft_tokens", "accepted", "generation_tokens", "running", "waiting"):
        name = n.prefix + getattr(n, figure)
        found = names.get(name)
        sums[figure] = None if found is None else round(finite(name, sum(value for _, value in found)))
    by_pos: Counter[int] = Counter()  # by draft position, summed over the other labels; a position not listed is 0
    for labels, value in names.get(n.prefix + n.accepted_per_pos, []):
        if labels.get("position", "").isdigit():
            by_pos[int(labels["position"])] += value
    per_pos = [round(finite("per position", by_pos[i])) for i in range(max(by_pos) + 1)] if by_pos else []
    return ServerScraped(session_id=session_id, t=t, url=url, kind=kind, accepted_per_pos=per_pos, **sums)


def finite(name: str, value: float) -> float:
    """A figure we count with: NaN or Inf there is a failed read (a gauge we do not read may be NaN)."""
    if not math.isfinite(value):
        raise NotMetrics(f"{name} is {value}")
    return value
