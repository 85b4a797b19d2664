"""specmon proxy in front of a real llama-server (drafting with itself): skipped, with the reason, where
none is built. The per-class sums in the log are the sums of the timings the client received, and a
streamed reply through the proxy is the one llama-server gives directly."""

from __future__ import annotations

import re

import httpx
import pytest
from llama_server import llama_server, self_draft
from test_proxy import PATHS, _rendered, proxy, timed
from upstream import reply_timings

from specmon.events.log import read_log
from events import tally_of
from specmon.proxy.routing import SPEC
from specmon.proxy.tables import log_summary

pytestmark = pytest.mark.slow
PROMPTS = {
    "chat": {"messages": [{"role": "user", "content": "Write the numbers from one to twelve in words."}]},
    "completion": {"prompt": "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n"},
}
# differ from call to call whatever the proxy does: the reply's id, its clock, and the decode's own timings
PER_CALL = [
    (re.compile(rb'"id":"[^"]*"'), b'"id":"-"'),
    (re.compile(rb'"created":\d+'), b'"created":0'),
    (re.compile(rb'"timings":\{[^}]*\}'), b'"timings":{}'),
]


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    with llama_server(tmp_path_factory.mktemp("llama"), spec=self_draft()) as url:
        yield url


def ask(base: str, endpoint: str, stream: bool, named: str | None = None) -> bytes:
    body = {**PROMPTS[endpoint], "max_tokens": 12, "temperature": 0, "stream": stream}
    headers = {"X-Specmon-Class": named} if named else {}
    with httpx.Client(timeout=600, trust_env=False) as client:  # a fresh connection, as llama-server needs
        with client.stream("POST", base + PATHS[endpoint], json=body, headers=headers) as reply:
            assert reply.status_code == 200
            return b"".join(reply.iter_raw())


def test_twenty_requests_per_class_sums_in_the_log_equal_the_timings_received(upstream, tmp_path):
    log = tmp_path / "p.specmon"
    asks = [("chat", False, None), ("completion", True, None), ("chat", True, "code-edit"), ("completion", False, None)]
    received: dict[str, list[dict]] = {}
    with proxy(log, upstream, scrape_s=1.0) as p:
        for endpoint, stream, named in asks * 5:
            content = ask(p.url, endpoint, stream, named)
            name = named or {"chat": "chat", "completion": "rewrite"}[endpoint]
            received.setdefault(name, []).append(reply_timings(content))
    totals = tally_of(timed(log)).totals
    assert sum(len(r) for r in received.values()) == 20
    assert {ev.family for ev in timed(log)} == {"llama-server"}  # its shape, read by proxy.evidence
    for name, replies in received.items():
        t = totals[(name, SPEC)]
        assert t.requests == t.timed == len(replies)
        assert t.draft_n == sum(r.get("draft_n", 0) for r in replies)
        assert t.draft_n_accepted == sum(r.get("draft_n_accepted", 0) for r in replies)
        assert t.predicted_n == sum(r["predicted_n"] for r in replies)
    assert sum(t.draft_n for t in totals.values()) > 0  # it did draft
    rows = {tuple(line.split()[:5]) for line in _rendered(log_summary(read_log(log))).splitlines()}
    for (name, upstream_kind), t in totals.items():
        assert (name, upstream_kind, str(t.requests), str(t.draft_n), str(t.draft_n_accepted)) in rows


def test_a_streamed_reply_through_the_proxy_is_the_direct_one_but_for_id_clock_and_timings(upstream, tmp_path):
    with proxy(tmp_path / "p.specmon", upstream) as p:
        through = ask(p.url, "chat", True)
    direct = ask(upstream, "chat", True)
    assert through.endswith(b"data: [DONE]\n\n") and through.count(b"\n\n") > 5
    for pattern, same in PER_CALL:
        through, direct = pattern.sub(same, through), pattern.sub(same, direct)
    assert through == direct
