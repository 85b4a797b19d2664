"""An upstream on the speculating side whose replies carry no draft counts is said once, by name, with
how to turn them on; its requests are counted, never shown as measured. The plain side is not told:
it is not meant to speculate. llama-server leaves draft_n out of a reply only when the request drafted
nothing, so where its own /metrics (the proxy reads them as a watch does) count drafts, the notice says
that, not how to turn drafting on. Pure functions of RequestTimed and ServerScraped events, so the
headless line, the view and `log info` say the same thing."""

from __future__ import annotations

from collections.abc import Iterable

from specmon.events.schema import RequestTimed, ServerScraped
from specmon.metrics.format import count

SPEC = "spec"  # RequestTimed.upstream of the speculating side (policy.route.SPEC)
NAMES = {"llama-server": "llama-server", "vllm": "vLLM", "tabbyapi": "TabbyAPI", "": "an unrecognised server"}
OMITS_WHEN_NONE = {"llama-server"}  # families whose reply leaves draft counts out only when it drafted nothing
HOW = {
    "llama-server": "it gives draft_n only to a request that drafted, and none has: if it runs without "
    "--spec-type, start it with a draft model (--spec-type draft-simple -md FILE) or n-gram drafting "
    "(--spec-type ngram-simple)",
    "vllm": "start it with --per-request-spec-decode-metrics summary (streams carry them on the usage chunk "
    "only: add --enable-force-include-usage, or clients send stream_options.include_usage)",
    "tabbyapi": "load a draft model (draft_model_name in its config); it sends usage only to requests that "
    "set stream_options.include_usage",
    "": "specmon reads llama-server's timings, vLLM's metrics.speculative_decoding and TabbyAPI's "
    "usage.completion_tokens_details",
}


# the view's short form (a pane 36 columns wide at 80x24): two lines, the upstream named by its host
PANE_HOW = {
    "llama-server": "drafted nothing yet; does it run with --spec-type?",
    "vllm": "needs --per-request-spec-decode-metrics (streams: include_usage)",
    "tabbyapi": "sends none: load a draft model, ask include_usage",
    "": "sends no draft counts specmon reads",
}


def where(ev: RequestTimed) -> str:
    """The upstream as a person finds it: the server that answered where the log names it, else its side."""
    return getattr(ev, "upstream_url", "") or ev.upstream


def drafting(ev: RequestTimed, drafts: int | None) -> bool:
    """The upstream drafts (its /metrics count drafts) and its replies say nothing only of requests that
    drafted nothing."""
    return ev.family in OMITS_WHEN_NONE and bool(drafts)


def notice(ev: RequestTimed, drafts: int | None = None) -> str:
    """The one line for an upstream whose replies gave no draft counts; `drafts`: its /metrics' count, where read."""
    name = NAMES.get(ev.family, ev.family)
    if drafting(ev, drafts):
        return (
            f"upstream {where(ev)} ({ev.upstream}, {name}) drafts ({count(drafts, 'draft')} on its /metrics) but no "
            "request through the proxy drafted: it gives draft_n only to a request that drafted, so its requests "
            "are counted, not measured"
        )
    return (
        f"upstream {where(ev)} ({ev.upstream}, {name}) reports no draft counts per request, so its requests "
        f"are counted, not measured: {HOW.get(ev.family, HOW[''])}"
    )


def pane_notice(ev: RequestTimed, drafts: int | None = None) -> str:
    """notice, short enough for the view's requests pane: it explains that pane's n/r."""
    host = where(ev).split("://", 1)[-1]
    if drafting(ev, drafts):
        return f"n/r: {host} drafts, but these requests drafted nothing"
    return f"n/r: {host} {PANE_HOW.get(ev.family, PANE_HOW[''])}"


def silent(ev: RequestTimed) -> bool:
    """A successful reply of the speculating side that carried no draft counts."""
    return ev.upstream == SPEC and 200 <= ev.status < 300 and ev.draft_n is None


def count_drafts(drafts: dict[str, int], read: ServerScraped) -> None:
    """Keep per upstream the drafts its /metrics counted at the latest read that found the counters (a
    restarted server counts from 0 again, so an old count never speaks for it)."""
    if read.drafts is not None:
        drafts[read.url] = read.drafts


class Unreported:
    """Folds requests (and reads of the upstream's /metrics) as they come: `observe` gives the notice for
    an upstream's first silent reply, unless an earlier reply of it carried counts; each is told once."""

    def __init__(self) -> None:
        self.reported: set[str] = set()
        self.told: set[str] = set()
        self.drafts: dict[str, int] = {}

    def read(self, scrape: ServerScraped) -> None:
        count_drafts(self.drafts, scrape)

    def observe(self, ev: RequestTimed) -> str | None:
        key = where(ev)
        if ev.draft_n is not None and 200 <= ev.status < 300:
            self.reported.add(key)
            return None
        if not silent(ev) or key in self.reported or key in self.told:
            return None
        self.told.add(key)
        return notice(ev, self.drafts.get(key))


def notices(events: Iterable[RequestTimed], reads: Iterable[ServerScraped] = ()) -> list[str]:
    """For a whole session (the summary, `log info`, the view): one line per speculating upstream whose
    successful replies all came without draft counts, said in the light of its last /metrics read."""
    last_silent: dict[str, RequestTimed] = {}
    reported: set[str] = set()
    for ev in events:
        if silent(ev):
            last_silent[where(ev)] = ev
        elif ev.draft_n is not None and 200 <= ev.status < 300:
            reported.add(where(ev))
    drafts: dict[str, int] = {}
    for read in reads:
        count_drafts(drafts, read)
    return [notice(ev, drafts.get(key)) for key, ev in last_silent.items() if key not in reported]


class SessionLines:
    """The headless proxy's told upstreams, per session (a process may run several: the tests do)."""

    KEPT = 64  # sessions remembered: enough for any process, bounded for a long-lived one

    def __init__(self) -> None:
        self.sessions: dict[str, Unreported] = {}

    def observe(self, ev: RequestTimed) -> str | None:
        return self._session(ev.session_id).observe(ev)

    def read(self, scrape: ServerScraped) -> None:
        self._session(scrape.session_id).read(scrape)

    def _session(self, session_id: str) -> Unreported:
        folded = self.sessions.get(session_id)
        if folded is None:
            if len(self.sessions) >= self.KEPT:
                self.sessions.pop(next(iter(self.sessions)))
            folded = self.sessions[session_id] = Unreported()
        return folded
