"""An upstream on the speculating side whose replies carry no draft counts is said once, by name, with
how to turn them on; its requests are counted, never shown as measured. The plain side is not told:
it is not meant to speculate. llama-server leaves draft_n out of a reply only when the request drafted
nothing, so where its own /metrics (the proxy reads them as a watch does) count drafts, or other replies
of it gave draft counts, the notice says that, not how to turn drafting on; before either, only that it
has reported no draft yet. Pure functions of RequestTimed and ServerScraped events, so the headless
line, the view and `log info` say the same thing."""

from __future__ import annotations

from collections.abc import Callable, Iterable

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
    "llama-server": "has reported no draft yet",  # an n-gram --spec-type drafts only where it finds a match
    "vllm": "needs --per-request-spec-decode-metrics (streams: include_usage)",
    "tabbyapi": "sends none: load a draft model, ask include_usage",
    "": "sends no draft counts specmon reads",
}


def where(ev: RequestTimed) -> str:
    """The upstream as a person finds it: the server that answered where the log names it, else its side."""
    return getattr(ev, "upstream_url", "") or ev.upstream


def reports(ev: RequestTimed) -> bool:
    """A successful reply that carried draft counts."""
    return ev.draft_n is not None and 200 <= ev.status < 300


def drafting(ev: RequestTimed, drafts: int | None, reported: bool = False) -> bool:
    """The upstream drafts (its /metrics count drafts, or a reply of it gave draft counts) and its replies
    say nothing only of requests that drafted nothing."""
    return ev.family in OMITS_WHEN_NONE and (bool(drafts) or reported)


def notice(ev: RequestTimed, drafts: int | None = None, reported: bool = False) -> str:
    """The one line for an upstream whose replies gave no draft counts; `drafts`: its /metrics' count, where
    read; `reported`: other replies of it gave draft counts."""
    name = NAMES.get(ev.family, ev.family)
    if drafting(ev, drafts, reported):
        evidence = f"{count(drafts, 'draft')} on its /metrics" if drafts else "replies of it gave draft counts"
        if reported:  # some of its requests drafted: the others did not
            silent_ones, counted = "some requests through the proxy drafted nothing", "those are"
        else:
            silent_ones, counted = "no request through the proxy drafted", "its requests are"
        return (
            f"upstream {where(ev)} ({ev.upstream}, {name}) drafts ({evidence}) but {silent_ones}: it gives "
            f"draft_n only to a request that drafted, so {counted} counted, not measured"
        )
    return (
        f"upstream {where(ev)} ({ev.upstream}, {name}) reports no draft counts per request, so its requests "
        f"are counted, not measured: {HOW.get(ev.family, HOW[''])}"
    )


def pane_notice(ev: RequestTimed, drafts: int | None = None, reported: bool = False) -> str:
    """notice, short enough for the view's requests pane: it explains that pane's n/r."""
    host = where(ev).split("://", 1)[-1]
    if drafting(ev, drafts, reported):
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
        if reports(ev):
            self.reported.add(key)
            return None
        reported = key in self.reported
        # after a report, a silence means something only where the family omits counts just for no draft
        if not silent(ev) or key in self.told or (reported and ev.family not in OMITS_WHEN_NONE):
            return None
        self.told.add(key)
        return notice(ev, self.drafts.get(key), reported)


class Silence:
    """Folds replies and reads into what explains a "not reported" row: each speculating upstream's last
    silent reply per class, the upstreams a reply of which gave counts, the classes a spec reply measured."""

    def __init__(self) -> None:
        self.silent: dict[tuple[str, str], RequestTimed] = {}  # (upstream, class) -> its last silent reply
        self.reported: set[str] = set()
        self.measured: set[str] = set()  # classes a reply of the speculating side gave counts for
        self.drafts: dict[str, int] = {}

    def reply(self, ev: RequestTimed) -> None:
        if reports(ev):
            self.reported.add(where(ev))
            if ev.upstream == SPEC:
                self.measured.add(ev.prompt_class)
        elif silent(ev):
            self.silent[(where(ev), ev.prompt_class)] = ev

    def read(self, scrape: ServerScraped) -> None:
        count_drafts(self.drafts, scrape)

    def notices(self, say: Callable[[RequestTimed, int | None, bool], str] = notice) -> list[str]:
        """One line per upstream whose silent replies left a class unmeasured, in the light of its last
        /metrics read and of its other replies."""
        unexplained = {key: ev for (key, cls), ev in self.silent.items() if cls not in self.measured}
        return [say(ev, self.drafts.get(key), key in self.reported) for key, ev in unexplained.items()]


def notices(events: Iterable[RequestTimed], reads: Iterable[ServerScraped] = ()) -> list[str]:
    """For a whole session (the summary, `log info`): Silence's lines once every reply and read is in."""
    folded = Silence()
    for ev in events:
        folded.reply(ev)
    for read in reads:
        folded.read(read)
    return folded.notices()


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
