"""An upstream on the speculating side whose replies carry no draft counts is said once, by name, with
how to turn them on; its requests are counted, never shown as measured. The plain side is not told:
it is not meant to speculate. Pure functions of RequestTimed events, so the headless line, the view
and `log info` say the same thing."""

from __future__ import annotations

from collections.abc import Iterable

from specmon.events.schema import RequestTimed

SPEC = "spec"  # RequestTimed.upstream of the speculating side (policy.route.SPEC)
NAMES = {"llama-server": "llama-server", "vllm": "vLLM", "tabbyapi": "TabbyAPI", "": "an unrecognised server"}
HOW = {
    "llama-server": "it gives draft_n only for requests that drafted: start it with a draft model "
    "(--spec-type draft-simple -md FILE) or n-gram drafting (--spec-type ngram-simple)",
    "vllm": "start it with --per-request-spec-decode-metrics summary (streams carry them on the usage chunk "
    "only: add --enable-force-include-usage, or clients send stream_options.include_usage)",
    "tabbyapi": "load a draft model (draft_model_name in its config); it sends usage only to requests that "
    "set stream_options.include_usage",
    "": "specmon reads llama-server's timings, vLLM's metrics.speculative_decoding and TabbyAPI's "
    "usage.completion_tokens_details",
}


def where(ev: RequestTimed) -> str:
    """The upstream as a person finds it: the server that answered where the log names it, else its side."""
    return getattr(ev, "upstream_url", "") or ev.upstream


def notice(ev: RequestTimed) -> str:
    """The one line for an upstream whose replies gave no draft counts."""
    name = NAMES.get(ev.family, ev.family)
    return (
        f"upstream {where(ev)} ({ev.upstream}, {name}) reports no draft counts per request, so its requests "
        f"are counted, not measured: {HOW.get(ev.family, HOW[''])}"
    )


def silent(ev: RequestTimed) -> bool:
    """A successful reply of the speculating side that carried no draft counts."""
    return ev.upstream == SPEC and 200 <= ev.status < 300 and ev.draft_n is None


class Unreported:
    """Folds requests as they come: `observe` gives the notice for an upstream's first silent reply,
    unless an earlier reply of it carried counts; each upstream is told once."""

    def __init__(self) -> None:
        self.reported: set[str] = set()
        self.told: set[str] = set()

    def observe(self, ev: RequestTimed) -> str | None:
        key = where(ev)
        if ev.draft_n is not None and 200 <= ev.status < 300:
            self.reported.add(key)
            return None
        if not silent(ev) or key in self.reported or key in self.told:
            return None
        self.told.add(key)
        return notice(ev)


def notices(events: Iterable[RequestTimed]) -> list[str]:
    """For a whole session (the summary, `log info`, the view): one line per speculating upstream whose
    successful replies all came without draft counts."""
    last_silent: dict[str, RequestTimed] = {}
    reported: set[str] = set()
    for ev in events:
        if silent(ev):
            last_silent[where(ev)] = ev
        elif ev.draft_n is not None and 200 <= ev.status < 300:
            reported.add(where(ev))
    return [notice(ev) for key, ev in last_silent.items() if key not in reported]


class SessionLines:
    """The headless proxy's told upstreams, per session (a process may run several: the tests do)."""

    KEPT = 64  # sessions remembered: enough for any process, bounded for a long-lived one

    def __init__(self) -> None:
        self.sessions: dict[str, Unreported] = {}

    def observe(self, ev: RequestTimed) -> str | None:
        folded = self.sessions.get(ev.session_id)
        if folded is None:
            if len(self.sessions) >= self.KEPT:
                self.sessions.pop(next(iter(self.sessions)))
            folded = self.sessions[ev.session_id] = Unreported()
        return folded.observe(ev)
