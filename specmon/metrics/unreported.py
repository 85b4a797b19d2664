"""An upstream on the speculating side whose replies carry no draft counts is said by name, with what
that means (verdict); its requests are counted, never shown as measured. The plain side is not told: it
is not meant to speculate. One fold, Silence, of the replies and of reads of the upstream's /metrics says
it for the view, `log info` and the headless line alike, so all three say the same thing. The headless
line tells an upstream's notice when a reply first leaves a class of it unmeasured, and again only where
what is said of it changes (a counted reply after a silent one).

A reply whose figures were out of range (RequestTimed.unmeasured, proxy.evidence) is not silent: its
upstream, on either side, gets one notice of its own with the first reason, said once by the headless
line; its later healthy replies are measured as ever."""

from __future__ import annotations

from collections.abc import Iterable

from specmon.events.schema import RequestTimed, ServerScraped
from specmon.metrics.format import count

SPEC = "spec"  # RequestTimed.upstream of the speculating side (policy.route.SPEC)
NAMES = {"llama-server": "llama-server", "vllm": "vLLM", "tabbyapi": "TabbyAPI", "": "an unrecognised server"}
OMITS_WHEN_NONE = {"llama-server"}  # families whose reply leaves draft counts out only when it drafted nothing
# how to turn counts on, per family: the whole advice for a line, and the view's short form (a pane 36
# columns wide at 80x24 gives it two lines, the upstream named by its host)
HOW = {
    "llama-server": (
        "it gives draft_n only to a request that drafted, and none has: if it runs without --spec-type, start "
        "it with a draft model (--spec-type draft-simple -md FILE) or n-gram drafting (--spec-type ngram-simple)",
        "has reported no draft yet",  # an n-gram --spec-type drafts only where it finds a match
    ),
    "vllm": (
        "start it with --per-request-spec-decode-metrics summary (streams carry them on the usage chunk "
        "only: add --enable-force-include-usage, or clients send stream_options.include_usage)",
        "needs --per-request-spec-decode-metrics (streams: include_usage)",
    ),
    "tabbyapi": (
        "load a draft model (draft_model_name in its config); it sends usage only to requests that "
        "set stream_options.include_usage",
        "sends none: load a draft model, ask include_usage",
    ),
    "": (
        "specmon reads llama-server's timings, vLLM's metrics.speculative_decoding and TabbyAPI's "
        "usage.completion_tokens_details",
        "sends no draft counts specmon reads",
    ),
}


def where(ev: RequestTimed) -> str:
    """The upstream as a person finds it: the server that answered where the log names it, else its side."""
    return ev.upstream_url or ev.upstream


DRAFTED_NOTHING, ELSEWHERE, NOT_REPORTED = "drafted nothing", "reported elsewhere", "not reported"


def missing_counts(upstream: str, answered: bool = True, short: bool = True) -> str:
    """What stands for draft counts a reply did not give: not reported where the speculating side answered, else `-`
    (the plain side is not meant to draft)."""
    if upstream != SPEC or not answered:
        return "-"
    return "n/r" if short else NOT_REPORTED


def verdict(ev: RequestTimed, drafts: int | None = None, reported: bool = False) -> str:
    """What an upstream's silent replies mean: its requests drafted nothing (it drafts: its /metrics count
    drafts, or a reply of it gave counts, and it says nothing only of requests that drafted nothing), it gave
    counts in other replies (`reported`) but not these, or it reports none."""
    if ev.family in OMITS_WHEN_NONE and (drafts or reported):
        return DRAFTED_NOTHING
    return ELSEWHERE if reported else NOT_REPORTED


def _who(ev: RequestTimed) -> tuple[str, str]:
    """The upstream named for a line, and by its host alone for the pane."""
    return f"upstream {where(ev)} ({ev.upstream}, {NAMES.get(ev.family, ev.family)})", where(ev).split("://", 1)[-1]


def said(ev: RequestTimed, drafts: int | None = None, reported: bool = False) -> tuple[str, str]:
    """What is said of an upstream whose replies gave no draft counts: the line, and the pane's short form
    (it explains that pane's n/r); `drafts`: its /metrics' count, where read; `reported`: other replies of
    it gave draft counts."""
    who, host = _who(ev)
    meant = verdict(ev, drafts, reported)
    if meant == DRAFTED_NOTHING:
        evidence = f"{count(drafts, 'draft')} on its /metrics" if drafts else "replies of it gave draft counts"
        if reported:  # some of its requests drafted: the others did not
            silent_ones, counted = "some requests through the proxy drafted nothing", "those are"
        else:
            silent_ones, counted = "no request through the proxy drafted", "its requests are"
        return (
            f"{who} drafts ({evidence}) but {silent_ones}: it gives draft_n only to a request that drafted, "
            f"so {counted} counted, not measured",
            f"n/r: {host} drafts, but these requests drafted nothing",
        )
    if meant == ELSEWHERE:  # its counts are on: these replies carried none (a stream without its usage chunk)
        return (
            f"{who} gave draft counts in other replies but none in some requests' replies: those are counted, "
            "not measured",
            f"n/r: {host} gave these replies no draft counts",
        )
    how, short = HOW.get(ev.family, HOW[""])
    return f"{who} reports no draft counts per request, so its requests are counted, not measured: {how}", (
        f"n/r: {host} {short}"
    )


def out_of_range(ev: RequestTimed, replies: int) -> tuple[str, str]:
    """The line for an upstream whose replies' figures were out of range (`ev` its first such reply), whole
    and in the pane's short form."""
    who, host = _who(ev)
    return (
        f"{who} sent figures out of range ({ev.unmeasured}) in {replies} {'reply' if replies == 1 else 'replies'}: "
        f"{'it was' if replies == 1 else 'they were'} relayed as sent and left unmeasured",
        f"unmeasured: {host} sent figures out of range ({ev.unmeasured})",
    )


class Silence:
    """Folds replies and reads into what explains a "not reported" row: each speculating upstream's last
    silent reply per class, the upstreams a reply of which gave counts, the classes a spec reply measured;
    and, for the headless line, what it last told of each upstream."""

    def __init__(self) -> None:
        self.silent: dict[tuple[str, str], RequestTimed] = {}  # (upstream, class) -> its last silent reply
        self.reported: set[str] = set()
        self.measured: set[str] = set()  # classes a reply of the speculating side gave counts for
        self.drafts: dict[str, int] = {}
        self.told: dict[str, str] = {}  # upstream -> the verdict the headless line last told of it
        self.bad: dict[str, tuple[RequestTimed, int]] = {}  # upstream -> (its first unmeasured reply, how many)

    def reply(self, ev: RequestTimed) -> None:
        if ev.unmeasured:
            first, replies = self.bad.get(where(ev), (ev, 0))
            self.bad[where(ev)] = (first, replies + 1)
        elif ev.draft_n is not None and 200 <= ev.status < 300:  # it carried draft counts
            self.reported.add(where(ev))
            if ev.upstream == SPEC:
                self.measured.add(ev.prompt_class)
        elif ev.upstream == SPEC and 200 <= ev.status < 300:  # a successful spec reply without draft counts
            self.silent[(where(ev), ev.prompt_class)] = ev

    def read(self, scrape: ServerScraped) -> None:
        """Keep the drafts the upstream's /metrics counted at the latest read that found the counters (a
        restarted server counts from 0 again, so an old count never speaks for it)."""
        if scrape.drafts is not None:
            self.drafts[scrape.url] = scrape.drafts

    def unexplained(self) -> dict[str, tuple[RequestTimed, int | None, bool]]:
        """Each upstream whose silent replies left a class unmeasured, with said's arguments for it."""
        left = {key: ev for (key, cls), ev in self.silent.items() if cls not in self.measured}
        return {key: (ev, self.drafts.get(key), key in self.reported) for key, ev in left.items()}

    def notices(self, short: bool = False) -> list[str]:
        """said's line per unexplained upstream, then out_of_range's per upstream that sent figures out of range
        (`short`: the pane's forms)."""
        told = [said(*why) for why in self.unexplained().values()] + [out_of_range(*b) for b in self.bad.values()]
        return [pane if short else line for line, pane in told]

    def observe(self, ev: RequestTimed) -> str | None:
        """Fold `ev`; the headless line's notice of its upstream where `notices` now says one that the line
        has not told (the first, or a changed verdict), else None."""
        self.reply(ev)
        key = where(ev)
        if ev.unmeasured:  # told once, at the upstream's first: its count goes on in `notices`
            return out_of_range(*self.bad[key])[0] if self.bad[key][1] == 1 else None
        why = self.unexplained().get(key)
        if why is None or self.told.get(key) == verdict(*why):
            return None
        self.told[key] = verdict(*why)
        return said(*why)[0]


def notices(events: Iterable[RequestTimed], reads: Iterable[ServerScraped] = ()) -> list[str]:
    """For a whole session (the summary, `log info`): Silence's lines once every reply and read is in."""
    folded = Silence()
    for ev in events:
        folded.reply(ev)
    for read in reads:
        folded.read(read)
    return folded.notices()
