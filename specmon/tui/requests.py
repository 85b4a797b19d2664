"""A serving session's requests pane (its queue, the request decoding, time to first token) folded from events
and rendered by pure functions, so `attach` and `replay` show what the live server showed."""

from __future__ import annotations

import collections
import statistics
from dataclasses import dataclass, field

from rich.text import Text

from specmon.events.schema import AnyEvent, PromptFinished, PromptStarted, QueueSample, RoundVerified
from specmon.metrics.format import MISSING, count
from specmon.metrics.rates import time_to_first_token_s
from specmon.server.records import short_id
from specmon.text import first_fitting

TTFT_KEPT = 50  # recent requests whose time to first token the median is over


@dataclass
class InFlight:
    """The request being decoded, as far as its events tell."""

    request_id: str
    endpoint: str
    arrived: float  # wall clock when it joined the queue
    prompt_class: str = ""
    k: int | None = None  # the k of its last round (before its first: the k it started at)
    prompt_tokens: int = 0
    max_tokens: int = 0
    tokens: int = 0  # emitted so far
    first_round_t: float | None = None


@dataclass
class Requests:
    """What the pane shows; exists only in a session that wrote a QueueSample (a server)."""

    waiting: int = 0
    in_flight: InFlight | None = None
    served: int = 0  # requests decoded to their end (eos, length or a stop string)
    cancelled: int = 0  # requests whose client left, or that the shutdown stopped, mid-decode
    ttfts: collections.deque = field(default_factory=lambda: collections.deque(maxlen=TTFT_KEPT))  # seconds
    now: float = 0.0  # the newest event's time: the in-flight request's elapsed counts to it

    def apply(self, ev: AnyEvent) -> None:
        self.now = max(self.now, ev.t)
        job = self.in_flight
        if isinstance(ev, QueueSample):
            self.waiting = ev.waiting
            if not ev.request_id:
                self.in_flight = None
            elif job is None or job.request_id != ev.request_id:
                self.in_flight = InFlight(ev.request_id, ev.endpoint, ev.arrived)
        elif job is None or getattr(ev, "prompt_id", None) != job.request_id:
            return  # not the request decoding
        elif isinstance(ev, RoundVerified):
            job.k = ev.draft_len
            job.tokens += len(ev.emitted)
            if job.first_round_t is None:
                job.first_round_t = ev.t
                self.ttfts.append(time_to_first_token_s(job.arrived, ev.t))
        elif isinstance(ev, PromptStarted):
            job.prompt_class, job.k = ev.prompt_class, ev.draft_len
            job.prompt_tokens, job.max_tokens = ev.prompt_tokens, ev.max_new_tokens
        elif isinstance(ev, PromptFinished):
            self.cancelled += ev.stop_reason == "cancelled"
            self.served += ev.stop_reason != "cancelled"
            self.in_flight = None


def seconds(value: float | None) -> str:
    """A duration as a person reads it: 84 ms, 1.24 s, 12.3 s."""
    if value is None:
        return MISSING
    if value < 1:
        return f"{value * 1e3:.0f} ms"
    return f"{value:.2f} s" if value < 10 else f"{value:.1f} s"


def requests_title(requests: Requests | None, width: int = 80, url: str = "") -> str:
    """Where clients reach the server, the queue depth, and how many were served: as the width allows, URL first."""
    head = f"requests on {url}" if url else "requests"
    if requests is None:
        return head
    title = f"{head} · {requests.waiting} waiting"
    busy = f"{title} · {requests.served} served"
    return first_fitting(width, *([busy] if requests.in_flight is not None else []), title, head)


def requests_subtitle(requests: Requests | None) -> str:
    """Time to first token: the last request's and the median over recent ones (queue wait included)."""
    if requests is None:
        return ""
    ttfts = requests.ttfts
    if not ttfts:
        return f"ttft {MISSING}"
    return f"ttft last {seconds(ttfts[-1])} · median {seconds(statistics.median(ttfts))} of {len(ttfts)}"


def render_requests(requests: Requests | None) -> Text:
    """One line: the request decoding (endpoint, id, [class] k, tokens, elapsed), or idle and how many served."""
    if requests is None:
        return Text()
    job = requests.in_flight
    if job is None:
        done = f"idle, {count(requests.served, 'request')} served"
        return Text(done + (f", {requests.cancelled} cancelled" if requests.cancelled else ""), style="dim")
    k = "k=?" if job.k is None else "plain" if job.k == 0 else f"k={job.k}"
    decoding = job.first_round_t is not None
    progress = f"{job.tokens}/{job.max_tokens} tok" if decoding else f"prefill {job.prompt_tokens} tok"
    return Text.assemble(
        ("▶ ", "bold green"),
        f"{job.endpoint} ",
        (short_id(job.request_id), "bold"),
        f" [{job.prompt_class}] {k} · {progress} · {seconds(requests.now - job.arrived)}",
    )
