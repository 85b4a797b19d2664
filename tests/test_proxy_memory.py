"""The proxy's routing remembers what it learned of an upstream pair (proxy.recall, memory.store): a
second session's first decision for a class is drawn from the first session's replies and cites them,
`policy explain` reproduces it from the log and that citation; another pair, --fresh and a damaged
store start cold. Each test's store is its own (conftest points SPECMON_STATE at a fresh directory)."""

from __future__ import annotations

import re
import time

import httpx
import msgspec
import pytest

from events import request_timed
from proxycli import proxy_command
from specmon.cli.inspect import event_line
from specmon.events.log import read_log
from specmon.events.schema import Decision, RequestTimed, StoredReply, decode, encode
from specmon.memory.store import HALF_LIFE_S, Memory, Shelf
from specmon.metrics.served import PROXY_CLOCK, SERVER_CLOCK
from specmon.policy.classify import matches_of
from specmon.policy.explain import explain_log, explain_route
from specmon.policy.schema import load_policy
from specmon.memory import store
from specmon.proxy.recall import KIND, StoredClass, StoredRoutes, routes_shelf
from specmon.proxy.routing import BOTH, PLAIN, SPEC, Router
from specmon.replay.report_policy import policy_history
from specmon.tui.rows import render_decision
from test_routing import policy

POLICY = load_policy("default")
TOKENS = 128
SPEEDS = {SPEC: 23.0, PLAIN: 25.0}  # speculation loses (0.92x): every reply alike, so the interval is clear
PAIR = (["http://spec:8080"], ["http://plain:8081"], {SPEC: "llama-server", PLAIN: "llama-server"})


def shelf(memory: Memory | None = None, pair=PAIR) -> Shelf:
    return routes_shelf(memory or Memory(), pair[0], pair[1])


def session_router(sid: str, memory: Memory | None = None, pair=PAIR, policy=POLICY) -> Router:
    """A session's Router against `pair` (spec URLs, plain URLs, the family each side named at start)."""
    return Router(policy, sid, has_plain=True, shelf=shelf(memory, pair), families=pair[2])


def answer(router: Router, sid: str, n: int, start: int = 0, speeds=SPEEDS, name: str = "chat", **timing):
    """n requests of class `name` in session `sid`, each routed by `router` and answered at speeds[side]
    tok/s: the sides taken, the decisions, and every request by id (as the log holds them)."""
    sides, decisions, seen = [], [], {}
    for i in range(start, start + n):
        side = router.side(name)
        ms = TOKENS / speeds[side] * 1e3
        fields = dict(predicted_ms=ms) | {k: f(side, ms) for k, f in timing.items()}
        ev = seen[f"{sid}-r{i}"] = request_timed(
            session_id=sid,
            t=float(i),
            request_id=f"{sid}-r{i}",
            prompt_class=name,
            upstream=side,
            predicted_n=TOKENS,
            **fields,
        )
        sides.append(side)
        decisions += router.observe(ev)
    return sides, decisions, seen


def first_session(memory: Memory | None = None, n: int = 16) -> dict[str, RequestTimed]:
    """Session s1: chat learns the pair (it goes plain after 4 requests a side), and its store is kept."""
    router = session_router("s1", memory)
    _, decisions, seen = answer(router, "s1", n)
    assert [(d.prompt_class, d.route.side_to) for d in decisions][0] == ("chat", PLAIN)
    router.remember(final=True)
    return seen


# -- the Router and its store ---------------------------------------------------------------------
def test_a_second_session_decides_a_class_before_its_first_request_citing_the_first_sessions_replies():
    seen = first_session()
    spec_ids = [rid for rid, ev in seen.items() if ev.upstream == SPEC]
    plain_ids = [rid for rid, ev in seen.items() if ev.upstream == PLAIN]
    router = session_router("s2")
    (d,) = router.opening
    c = d.route
    assert (d.prompt_class, c.side_from, c.side_to, d.applied, d.request_ids) == ("chat", BOTH, PLAIN, True, [])
    # the newest `window` (8) of each side: 16 requests went plain from the 9th on, 4 to spec
    assert [r.request_id for r in c.recalled] == spec_ids[-8:] + plain_ids[-8:]
    assert {r.session_id for r in c.recalled} == {"s1"} and (c.spec_requests, c.plain_requests) == (4, 8)
    assert c.recalled[0] == StoredReply("s1", spec_ids[0], SPEC, SERVER_CLOCK, TOKENS, TOKENS / 23.0 * 1e3)
    assert c.ratio == pytest.approx(23.0 / 25.0) and c.borrowed == 0
    assert "(12 of them stored by session s1)" in d.reason, d.reason
    e = explain_route(d, {})
    assert e.reproduces and "from 4 spec requests and 8 plain requests (12 of them stored by session s1) on" in e.detail
    sides, later, _ = answer(router, "s2", 3, start=100)
    assert sides == [PLAIN, PLAIN, PLAIN] and later == []  # it went there from its first request
    # what it was drawn from, as the view, the watcher's line and the report say it
    assert render_decision(d, []).endswith("\ncited 12 requests (12 of them stored)")
    assert event_line(d).endswith("by routing.min_requests, from 12 requests (12 of them stored)")
    assert policy_history([d])[0]["cited"] == "12 requests (12 of them stored)"


def test_its_own_replies_take_the_stored_ones_places_and_a_later_decision_says_whose_were_whose():
    first_session()
    second = session_router("s2")
    answer(second, "s2", 3, start=100)  # three plain replies of its own
    second.remember(final=True)
    kept = shelf().recall(StoredRoutes)
    assert kept.session_id == "s2"
    replies = kept.body.classes["chat"].replies
    plain = [r.request_id for r in replies if r.side == PLAIN]
    assert plain == [f"s1-r{i}" for i in range(11, 16)] + [f"s2-r{i}" for i in range(100, 103)]
    assert len([r for r in replies if r.side == SPEC]) == 4  # spec had room for all of them
    third = session_router("s3")
    (d,) = third.opening
    assert "(12 of them stored: 9 by session s1, 3 by session s2)" in d.reason, d.reason
    assert "9 by session s1, 3 by session s2" in explain_route(d, {}).detail


def test_stored_replies_count_less_as_they_age():
    chat = POLICY.classes[[c.name for c in POLICY.classes].index("chat")]
    replies = [
        StoredReply("old", f"o{side}{i}", side, SERVER_CLOCK, TOKENS, TOKENS / SPEEDS[side] * 1e3)
        for side in (SPEC, PLAIN)
        for i in range(8)
    ]
    for age_s, each, decided in [(HALF_LIFE_S, 4, True), (3 * HALF_LIFE_S, 1, False)]:
        stored = StoredRoutes({"chat": StoredClass(replies, "old", time.time() - age_s, matches_of(chat))})
        shelf().keep("old", stored)
        router = session_router("s")
        assert bool(router.opening) is decided
        newest = {side: [f"o{side}{i}" for i in range(8 - each, 8)] for side in (SPEC, PLAIN)}
        assert {side: [r.request_id for r in got] for side, got in router.classes["chat"].stored.items()} == newest
        if decided:  # a week on, half of each side (the newest 4): enough for a clear interval
            assert [r.request_id for r in router.opening[0].route.recalled] == newest[SPEC] + newest[PLAIN]
        else:  # three weeks on, an eighth (1 a side): too few to move it, and it alternates as if cold
            assert answer(router, "s", 2)[0] == [SPEC, PLAIN]


def test_a_class_whose_match_rules_changed_does_not_read_what_the_old_rules_measured():
    first_session()
    changed = policy(chat="match = { min_chars = 3 }")
    router = session_router("s2", policy=changed)
    assert router.opening == [] and answer(router, "s2", 2, start=100)[0] == [SPEC, PLAIN]


def test_another_upstream_pair_fresh_and_a_damaged_store_start_cold():
    first_session()
    other = (PAIR[0], ["http://elsewhere:8081"], PAIR[2])
    relabelled = (PAIR[0], PAIR[1], {SPEC: "vllm", PLAIN: "vllm"})
    said: list[str] = []
    for pair in (other, relabelled):
        assert session_router("s2", Memory(warn=said.append), pair).opening == []
    # another server now at the spec side's URL (the first side that differs is named): one line
    assert said == [
        "warning: the routing stored for http://spec:8080 is not used: it was measured on llama-server, "
        "and vllm answers there now"
    ]
    fresh = session_router("s3", Memory(fresh=True))
    assert fresh.opening == [] and answer(fresh, "s3", 2, start=100)[0] == [SPEC, PLAIN]
    fresh.remember(final=True)  # --fresh reads nothing, and still keeps what it learns
    assert shelf().recall(StoredRoutes).session_id == "s3"
    Memory().path(KIND, routes_shelf(Memory(), PAIR[0], PAIR[1]).key).write_text(
        '{"version": 1, "kind": "routes", "key": '
    )
    said.clear()
    damaged = session_router("s4", Memory(warn=said.append))
    assert damaged.opening == [] and answer(damaged, "s4", 2, start=200)[0] == [SPEC, PLAIN]
    assert len(said) == 1 and said[0].startswith("warning: the memory store ") and "it is damaged" in said[0]


def test_a_side_still_loading_at_start_reads_what_the_same_urls_taught_and_keeps_their_family():
    """A proxy started beside its servers (/health 503: no family named yet) opens from the store the
    last session wrote, and writes the family that store knew, for the next session to compare."""
    first_session()
    (known,) = session_router("s2").opening
    loading = (PAIR[0], PAIR[1], {SPEC: "", PLAIN: ""})
    second = session_router("s2", pair=loading)
    (d,) = second.opening
    assert d.route.side_to == PLAIN and d.route.recalled and d.route.recalled == known.route.recalled
    answer(second, "s2", 2, start=100)
    second.remember(final=True)
    assert shelf().recall(StoredRoutes).body.families == {SPEC: "llama-server", PLAIN: "llama-server"}


def test_the_store_is_written_as_the_session_goes_at_most_every_keep_every_s(monkeypatch):
    router = session_router("s1")
    answer(router, "s1", 2)
    router.remember()  # the first learning is kept at once
    assert len(shelf().recall(StoredRoutes).body.classes["chat"].replies) == 2
    answer(router, "s1", 2, start=2)
    router.remember()
    assert len(shelf().recall(StoredRoutes).body.classes["chat"].replies) == 2  # within KEEP_EVERY_S of it
    monkeypatch.setattr(store, "KEEP_EVERY_S", 0.0)
    router.remember()
    assert [r.request_id for r in shelf().recall(StoredRoutes).body.classes["chat"].replies] == [
        "s1-r0",
        "s1-r2",
        "s1-r1",
        "s1-r3",
    ]


def test_a_pair_judged_on_the_proxys_clock_starts_there_and_its_stored_decision_reproduces():
    """The plain side gives no decode time: the first session moved to the proxy's clock, so the second
    starts there (it would else wait for two more replies without one) and its stored replies hold
    their proxy-clock figures."""
    no_decode_ms = dict(predicted_ms=lambda side, ms: ms if side == SPEC else None, total_ms=lambda side, ms: ms + 40)
    router = session_router("s1")
    _, decisions, _ = answer(router, "s1", 16, **no_decode_ms)
    assert decisions[0].route.clock == PROXY_CLOCK
    router.remember(final=True)
    second = session_router("s2")
    (d,) = second.opening
    assert (d.route.clock, d.route.side_to) == (PROXY_CLOCK, PLAIN)
    assert {r.clock for r in d.route.recalled} == {PROXY_CLOCK} and d.route.recalled[0].ms == TOKENS / 23.0 * 1e3 + 40
    assert (second.clock, second.clockless) == (PROXY_CLOCK, [PLAIN])
    assert "on the proxy's clock (plain gives no decode time)" in d.reason and explain_route(d, {}).reproduces


def test_a_decision_citing_stored_replies_round_trips_through_the_codec():
    first_session()
    (d,) = session_router("s2").opening
    back = decode(encode(d))
    assert back == d and isinstance(back.route.recalled[0], StoredReply) and len(back.route.recalled) == 12
    old = msgspec.msgpack.encode(["route", "both", "spec", 0.05, 1.3, 1.2, 1.4, 4, 4, 8, 8, "server", 2])
    assert msgspec.msgpack.decode(old, type=type(d.route)).recalled == []  # an older log's decision: none


# -- through the proxy, real sockets ---------------------------------------------------------------
def proxied(tmp_path, name: str, spec_url: str, plain_url: str, memory: Memory, requests: int):
    """A proxy session to the two stand-ins, `requests` chat requests through it: the log's events, its path."""
    from specmon.proxy.server import ProxyOptions, Proxying
    from specmon.transport.session import observed_header, observer_session

    log = tmp_path / f"{name}.specmon"
    header = lambda sid: observed_header(sid, "proxy", spec_url, "vllm", POLICY)  # noqa: E731
    with observer_session(header, log, serve=False, announce=False) as session:
        options = ProxyOptions([spec_url], [plain_url], port=0, scrape_s=None, line=lambda _: None)
        options.memory, options.families = memory, {SPEC: "vllm", PLAIN: "vllm"}
        proxying = Proxying(session.session_id, session.channel.publish, POLICY, options)
        proxying.start()
        try:
            with httpx.Client(trust_env=False, timeout=30) as client:
                for i in range(requests):
                    body = {"messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 34}
                    reply = client.post(proxying.url + "/v1/chat/completions", json=body)
                    assert reply.status_code == 200
        finally:
            proxying.stop()
    return list(read_log(log)), log


def standins():
    from standins import VllmStandin, from_histogram

    spec = VllmStandin(lambda body: from_histogram([4, 4, 4, 3], decode_ms=100.0 / 0.85))  # 37 tokens at 0.85x
    plain = lambda: VllmStandin(lambda body: from_histogram([36], decode_ms=100.0), spec_metrics=False)  # noqa: E731
    return spec, plain(), plain()


def decisions_before_requests(events: list) -> list[Decision]:
    first = next(i for i, e in enumerate(events) if isinstance(e, RequestTimed))
    return [e for e in events[:first] if isinstance(e, Decision)]


def test_through_the_proxy_a_second_session_starts_from_the_first_and_explain_reproduces_it(tmp_path):
    spec, plain, _ = standins()
    with spec as s, plain as p:
        first, _ = proxied(tmp_path, "one", s.url, p.url, Memory(), 10)
        second, log = proxied(tmp_path, "two", s.url, p.url, Memory(), 2)
    sid = first[0].session_id
    chat = {e.request_id: e for e in first if isinstance(e, RequestTimed)}
    assert [e.route.side_to for e in first if isinstance(e, Decision) and e.prompt_class == "chat"] == [PLAIN]
    (d,) = decisions_before_requests(second)  # decided at start, before its first request
    c = d.route
    assert (d.prompt_class, c.side_from, c.side_to, d.request_ids) == ("chat", BOTH, PLAIN, [])
    assert [r.request_id for r in c.recalled] == [e.request_id for e in chat.values() if e.upstream == SPEC] + [
        e.request_id for e in chat.values() if e.upstream == PLAIN
    ]  # every one of them: 4 spec, 6 plain
    for r in c.recalled:  # each with the figures its reply gave in the first session's log
        ev = chat[r.request_id]
        assert (r.session_id, r.side, r.clock, r.tokens, r.ms) == (sid, ev.upstream, SERVER_CLOCK, 37, ev.predicted_ms)
    assert c.ratio == pytest.approx(0.85)
    assert [e.upstream for e in second if isinstance(e, RequestTimed)] == [PLAIN, PLAIN]
    explained = {e.decision.decision_id: e for e in explain_log(log)}
    said = explained[d.decision_id]
    assert said.reproduces and f"4 spec requests and 6 plain requests (10 of them stored by session {sid}) on" in (
        said.detail
    )
    assert all(e.reproduces for e in explained.values())


def test_through_the_proxy_another_pair_fresh_and_a_damaged_store_start_cold(tmp_path):
    spec, plain, other = standins()
    said: list[str] = []
    with spec as s, plain as p, other as o:
        proxied(tmp_path, "one", s.url, p.url, Memory(), 10)
        path = Memory().path(KIND, routes_shelf(Memory(), [s.url], [p.url]).key)
        kept = path.read_bytes()
        runs = {
            "elsewhere": proxied(tmp_path, "elsewhere", s.url, o.url, Memory(), 2)[0],
            "fresh": proxied(tmp_path, "fresh", s.url, p.url, Memory(fresh=True), 2)[0],
        }
        assert path.read_bytes() != kept  # --fresh read nothing, and kept what it learned
        path.write_bytes(b"\x00not a store")
        runs["damaged"] = proxied(tmp_path, "damaged", s.url, p.url, Memory(warn=said.append), 2)[0]
    for name, events in runs.items():
        assert decisions_before_requests(events) == [], name
        assert [e.upstream for e in events if isinstance(e, RequestTimed)] == [SPEC, PLAIN], name  # alternating
    assert len(said) == 1 and f"the memory store {path} is not used: it is damaged" in said[0], said


def test_the_command_keys_the_store_by_the_pair_and_fresh_ignores_it(tmp_path):
    """`specmon proxy` itself, twice against the same two servers and once with --fresh: the second run's
    headless line for chat says where it went at start and from which session's replies."""
    from upstream import FakeUpstream, request_body

    with FakeUpstream() as spec, FakeUpstream("-plain") as plain:
        argv = ["--upstream", spec.url, "--plain-upstream", plain.url, "--port", "0", "--headless"]

        def run(name: str, requests: int, *more: str) -> str:
            log = tmp_path / f"{name}.specmon"
            with proxy_command(*argv, "--log", str(log), *more, columns=300) as proxy:
                for _ in range(requests):
                    assert httpx.post(proxy.url + "/v1/chat/completions", json=request_body("chat")).status_code == 200
            assert proxy.proc.returncode == 130, proxy.err
            return proxy.out

        run("one", 8)
        sid = next(iter(read_log(tmp_path / "one.specmon"))).session_id
        warm, cold = run("two", 0), run("three", 0, "--fresh")
    assert re.search(rf"class chat: both -> plain .*\(8 of them stored by session {sid}\)", warm), warm
    assert "class chat" not in cold, cold
