"""The proxy's routing rule (policy.route, proxy.routing) and its pools (proxy.pool), on requests
whose figures are given: where a class goes, when it moves, what each move cites, and that
`policy explain`'s recomputation agrees with every move."""

from __future__ import annotations

import random
import subprocess
import sys
import threading

import httpx

import pytest

from specmon.events.schema import RequestTimed
from specmon.policy.explain import explain_route
from specmon.policy.schema import load_policy, parse_policy
from specmon.proxy import pool as pools
from specmon.proxy.routing import BOTH, PLAIN, SPEC, Router
from events import request_timed

DEFAULT = load_policy("default")
TOKENS = 128


def policy(mode: str = "enforce", chat: str = ""):
    """The shipped policy (its [routing] as shipped), in `mode`, with `chat` added to class chat."""
    text = DEFAULT.text.replace('mode = "enforce"', f'mode = "{mode}"')
    return parse_policy(text.replace('name = "chat"', f'name = "chat"\n{chat}'), "t.toml")


def reply(i: int, side: str, tok_per_s: float, name: str = "chat", status: int = 200) -> RequestTimed:
    return request_timed(
        t=float(i),
        request_id=f"r{i}",
        prompt_class=name,
        upstream=side,
        status=status,
        predicted_n=TOKENS,
        predicted_ms=TOKENS / tok_per_s * 1e3,
    )


def drive(
    router: Router, n: int, speed, start: int = 0, rng=None, seen=None, name: str = "chat"
) -> tuple[list[str], list, list[str]]:
    """n requests of class `name`, each routed and answered at speed(i, side) tok/s (times a prompt's
    own spread, drawn from rng): the sides taken, the class's decisions (each with the requests so
    far, for explain) and its side after each request. The classes it lends its requests to move too:
    each of those moves reproduces in explain."""
    sides, decisions, after = [], [], []
    seen = {} if seen is None else seen  # every request so far, as the log holds them
    for i in range(start, start + n):
        side = router.side(name)
        spread = rng.uniform(0.85, 1.15) if rng else 1.0
        ev = seen[f"r{i}"] = reply(i, side, speed(i, side) * spread, name)
        sides.append(side)
        for d in router.observe(ev):
            if d.prompt_class == name:
                decisions.append((d, dict(seen)))
            else:
                assert d.route.borrowed and explain_route(d, seen).reproduces, d.reason
        after.append(router.classes[name].side if name in router.classes else None)
    return sides, decisions, after


def loses(i, side):
    return 25.0 * (0.92 if side == SPEC else 1.0)


def pays(i, side):
    return 25.0 * (1.35 if side == SPEC else 1.0)


def test_a_class_alternates_until_measured_then_goes_where_goodput_is_higher():
    router = Router(policy(), "s", has_plain=True)
    sides, decisions, _ = drive(router, 8, pays)
    assert sides == [SPEC, PLAIN] * 4  # half of min_requests = 8 on each side: the interval is clear
    ((d, cited),) = decisions
    assert (d.route.side_from, d.route.side_to, d.speculate_to, d.applied) == (BOTH, SPEC, True, True)
    assert d.rule_key == "routing.min_requests" and d.rule_line == router.policy.line_of("routing", "min_requests")
    assert d.request_ids == [f"r{i}" for i in [*range(0, 8, 2), *range(1, 8, 2)]]
    assert "interval excludes 1.0 after 4 requests on each side" in d.reason
    assert d.route.ratio == pytest.approx(1.35)
    assert explain_route(d, cited).reproduces
    sides, _, _ = drive(router, 100, pays, start=8)
    assert sides.count(PLAIN) == 5  # explore_share 0.05 of them, evenly spread
    assert [i for i, s in enumerate(sides) if s == PLAIN] == [19, 39, 59, 79, 99]


def test_a_class_whose_sides_are_close_alternates_until_min_requests_then_takes_the_higher():
    router = Router(policy(), "s", has_plain=True)
    close = lambda i, side: 25.0 if side == PLAIN else (21.0, 29.0)[i // 2 % 2]  # noqa: E731  spec 0.99x, spread
    sides, decisions, _ = drive(router, 16, close)
    assert sides == [SPEC, PLAIN] * 8 and len(decisions) == 1
    ((d, cited),) = decisions
    assert (d.route.side_to, d.route.spec_requests, d.route.plain_requests) == (PLAIN, 8, 8)
    assert d.route.low < 1.0 < d.route.high and "higher measured goodput after 8 requests" in d.reason
    assert explain_route(d, cited).reproduces


FOLLOWS_WITHIN = 160  # requests after a class's traffic turns; docs/watching.md states it


def settled(after: list[str], side: str) -> int:
    """Requests until the class went to `side` for good (len(after) if it is elsewhere at the end)."""
    rest = [i for i, s in enumerate(after) if s != side]
    return rest[-1] + 1 if rest else 0


def test_routing_follows_a_class_whose_traffic_turns_from_losing_to_paying_and_back():
    """With the default routing (explore 5%, window 8, min_requests 8), a class whose traffic turns
    moves within FOLLOWS_WITHIN requests each way, over 20 seeds of prompt-to-prompt spread; every
    move reproduces in explain. A first choice made on 4 requests a side can be wrong and last: at
    0.92x, 5 of 500 seeds were still on spec after 200 requests (8 of 500 with min_requests=8 only
    settling at 8 a side), so one such run of the 20 is allowed and counted."""
    follows, wrong_first = [], 0
    for seed in range(20):
        rng = random.Random(seed)
        router, seen = Router(policy(), "s", has_plain=True), {}
        _, first, after = drive(router, 100, loses, rng=rng, seen=seen)
        wrong_first += after[-1] != PLAIN
        _, turned, after = drive(router, 200, pays, start=100, rng=rng, seen=seen)
        follows.append(settled(after, SPEC))
        _, back, after = drive(router, 200, loses, start=300, rng=rng, seen=seen)
        follows.append(settled(after, PLAIN))
        for d, cited in first + turned + back:
            e = explain_route(d, cited)
            assert e.reproduces, (seed, e.detail)
    print("requests to follow, to spec:", sorted(follows[::2]), "back:", sorted(follows[1::2]), "wrong:", wrong_first)
    assert wrong_first <= 1 and max(follows) <= FOLLOWS_WITHIN, (wrong_first, follows)


def test_advise_mode_sends_a_fixed_share_plain_and_logs_what_it_would_do_unapplied():
    router = Router(policy(mode="advise"), "s", has_plain=True, advise_share=0.25)
    sides, decisions, after = drive(router, 40, pays)
    assert sides.count(PLAIN) == 10 and sides[:4] == [SPEC, SPEC, SPEC, PLAIN]  # as before the policy routed
    assert [(d.route.side_to, d.applied) for d, _ in decisions] == [(SPEC, False)]
    assert router.share("chat") == 0.25


@pytest.mark.parametrize(("speculate", "side"), [("on", SPEC), ("off", PLAIN)])
def test_a_class_the_file_pins_goes_to_its_side_and_decides_nothing(speculate, side):
    router = Router(policy(chat=f'speculate = "{speculate}"'), "s", has_plain=True)
    sides, decisions, _ = drive(router, 30, loses if side == SPEC else pays)
    assert set(sides) == {side} and decisions == []


def test_without_a_plain_side_everything_goes_to_spec_and_nothing_is_decided():
    router = Router(policy(), "s", has_plain=False)
    assert set(drive(router, 30, loses)[0]) == {SPEC} and not drive(router, 30, loses)[1]


def test_an_edit_to_routing_is_taken_at_the_next_request_and_restarts_every_class(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(policy().text)
    router = Router(load_policy(path), "s", has_plain=True)
    drive(router, 16, pays)
    assert router.maybe_reload() is None and router.classes["chat"].side == SPEC
    path.write_text(path.read_text().replace("explore_share = 0.05", "explore_share = 0.5"))
    taken = router.maybe_reload()
    assert taken.accepted and taken.changed == ["routing"] and router.policy.routing.explore_share == 0.5
    assert "chat" not in router.classes  # measured under the old routing: starts again from both sides
    path.write_text(path.read_text().replace("explore_share = 0.5", "explore_share = 0.9"))
    refused = router.maybe_reload()
    assert not refused.accepted and "routing.explore_share = 0.9 is out of range" in refused.error
    assert router.policy.routing.explore_share == 0.5  # the previous policy stays in force


def test_a_pool_takes_the_member_with_fewest_outstanding_and_spreads_ties():
    said: list[str] = []
    pool = pools.Pool(SPEC, ["http://a", "http://b", "http://c"], said.append)
    a, b, c = pool.members
    assert pool.up()[0] is a
    a.outstanding, a.sent = 1, 1
    assert pool.up()[0] is b
    b.sent = 1
    assert pool.up()[0] is c  # b and c both idle: c has been sent fewer
    pool.failed(c, "connection refused")
    pool.failed(c, "connection refused")
    assert said == ["upstream http://c (spec) is down (connection refused): left out, its /health asked every 5 s"]
    assert pool.up() == [b, a] and len(pool.up()) == 2
    assert pools.candidates([pool]) == [b, a, c]  # a member down is tried only after every one up
    pool.answered(c)
    assert said[-1].startswith("upstream http://c (spec) answers again after") and len(said) == 2
    pool.failed(a, "refused"), pool.failed(b, "refused"), pool.failed(c, "refused")
    assert pools.candidates([pool]) == [a, b, c]  # every member down: still tried, never a request refused unsent


def test_through_the_proxy_a_dead_member_is_left_out_said_once_and_the_busy_one_passed_over(tmp_path):
    """Real sockets: a pool of two stand-ins and a port nothing listens on."""
    from test_proxy import PATHS, timed
    from test_proxy_cli import refused_port
    from upstream import FakeUpstream, request_body

    from specmon.proxy.server import ProxyOptions, Proxying
    from specmon.transport.session import observed_header, observer_session

    lines: list[str] = []
    log = tmp_path / "p.specmon"
    with FakeUpstream() as a, FakeUpstream() as b:
        dead = refused_port()
        header = lambda sid: observed_header(sid, "proxy", a.url, "llama-server", DEFAULT)  # noqa: E731
        with observer_session(header, log, serve=False, announce=False) as session:
            options = ProxyOptions([a.url, dead, b.url], port=0, scrape_s=None, line=lines.append)
            proxying = Proxying(session.session_id, session.channel.publish, DEFAULT, options)
            proxying.start()
            try:
                for _ in range(6):
                    assert httpx.post(proxying.url + PATHS["chat"], json=request_body("chat")).status_code == 200
                a.hold = threading.Event()  # a's next reply waits: one request outstanding there
                held = threading.Thread(
                    target=httpx.post, args=(proxying.url + PATHS["chat"],), kwargs={"json": request_body("chat")}
                )
                held.start()
                assert a.reached_hold.wait(10)
                before = len(b.requests)
                assert httpx.post(proxying.url + PATHS["chat"], json=request_body("chat")).status_code == 200
                assert len(b.requests) == before + 1  # passed a over: it had one outstanding
                a.hold.set()
                held.join(10)
            finally:
                proxying.stop()
    down = [line for line in lines if "is down" in line]
    assert down == [f"upstream {dead} (spec) is down (connection refused): left out, its /health asked every 5 s"]
    events = timed(log)
    assert len(events) == 8 and {e.status for e in events} == {200}
    assert {e.upstream_url for e in events} == {a.url, b.url} and len(a.requests) + len(b.requests) == 8


def test_through_the_proxy_a_class_follows_its_traffic_and_explain_and_the_view_agree(tmp_path):
    """Real sockets: vLLM stand-ins, one speculating and one plain, behind the proxy with a policy file
    whose [routing] explores 20%. The class's replies turn from speculation losing (0.85x) to paying
    (1.3x): the log's decisions move it plain, then spec; `specmon policy explain` reproduces both;
    the served view's classes pane says where it went."""
    from standins import VllmStandin, from_histogram
    from test_proxy import PATHS

    from specmon.events.log import read_log
    from specmon.events.schema import Decision
    from specmon.proxy.server import ProxyOptions, Proxying
    from specmon.transport.session import observed_header, observer_session
    from specmon.tui.served_panes import render_classes
    from specmon.tui.served_state import ServedState

    file = tmp_path / "p.toml"
    file.write_text(DEFAULT.text.replace("explore_share = 0.05", "explore_share = 0.2"))
    pol, log, speedup = load_policy(str(file)), tmp_path / "p.specmon", [0.85]
    spread = lambda body: 1.0 + 0.1 * ((len(body["messages"][0]["content"]) % 5) - 2) / 2  # noqa: E731  ±10%
    spec = lambda body: from_histogram([4, 4, 4, 3], decode_ms=100.0 / speedup[0] * spread(body))  # noqa: E731
    plain = lambda body: from_histogram([33], decode_ms=100.0 * spread(body))  # noqa: E731  34 tokens too
    with VllmStandin(spec) as s, VllmStandin(plain, spec_metrics=False) as p:
        header = lambda sid: observed_header(sid, "proxy", s.url, "vllm", pol)  # noqa: E731
        with observer_session(header, log, serve=False, announce=False) as session:
            options = ProxyOptions([s.url], [p.url], port=0, scrape_s=None, line=lambda _: None)
            proxying = Proxying(session.session_id, session.channel.publish, pol, options)
            proxying.start()
            try:
                with httpx.Client(trust_env=False, timeout=30) as client:
                    for i in range(160):
                        speedup[0] = 0.85 if i < 60 else 1.3
                        body = {"messages": [{"role": "user", "content": "x" * i}], "max_tokens": 34}
                        reply = client.post(
                            proxying.url + PATHS["chat"], json=body, headers={"X-Specmon-Class": "chat"}
                        )
                        assert reply.status_code == 200
            finally:
                proxying.stop()
    events = list(read_log(log))
    chat = [isinstance(e, Decision) and e.prompt_class == "chat" for e in events]
    moves = [(e.route.side_from, e.route.side_to, e.applied) for e, mine in zip(events, chat) if mine]
    assert moves == [(BOTH, PLAIN, True), (PLAIN, SPEC, True)], moves
    before = [sum(isinstance(e, RequestTimed) for e in events[:i]) for i, mine in enumerate(chat) if mine]
    print("requests before each move:", before)
    assert before[0] <= 16 and 60 < before[1] <= 60 + 40, before  # learning; then following the turn at 60
    said = subprocess.run(
        [sys.executable, "-m", "specmon.cli", "policy", "explain", str(log)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert said.returncode == 0, said.stderr
    decided = sum(isinstance(e, Decision) for e in events)  # chat's two moves and the classes it lent to
    assert decided > 2 and said.stdout.count("reproduces") == decided, said.stdout
    assert "not reproduce" not in said.stdout, said.stdout
    state = ServedState()
    state.apply(events)
    pane = render_classes(state, 78).plain
    assert "\nchat → spec 1.1" in pane and "→ routed, by spec/plain goodput" in pane, pane


def test_a_class_with_two_requests_goes_where_the_other_classes_say_the_pair_is_faster():
    """#60: once chat has shown the pair (speculation at 0.92x), a class never seen goes plain from its
    first request, by a Decision citing chat's requests, which explain reproduces."""
    router, seen = Router(policy(), "s", has_plain=True), {}
    drive(router, 40, loses, seen=seen)
    lent = router.classes["code-edit"]
    assert lent.side == PLAIN and not any(lent.recent.values())  # moved before any request of its own
    sides, own, _ = drive(router, 2, loses, start=40, seen=seen, name="code-edit")
    assert sides == [PLAIN, PLAIN] and own == []
    d = next(e for e in router_decisions(router, seen) if e.prompt_class == "code-edit")
    assert d.route.borrowed == len(d.request_ids) >= 2 * (router.policy.routing.min_requests // 2)
    assert {seen[r].prompt_class for r in d.request_ids} == {"chat"} and "chat's" in d.reason


def router_decisions(router: Router, seen: dict) -> list:
    """The decisions a fresh Router makes over `seen` again, in order (the log's, as the proxy wrote it)."""
    again = Router(router.policy, "s", has_plain=True)
    out = []
    for ev in seen.values():
        again.side(ev.prompt_class)
        out += again.observe(ev)
    return out


def test_a_borrowing_class_moves_on_its_own_once_its_own_requests_say_otherwise():
    """A class whose own traffic pays (1.35x) while the pair, by chat's requests, loses: it starts plain
    with the rest, and its own requests (explore_share of them to spec) take the borrowed ones' places
    until its interval moves it, within FOLLOWS_WITHIN of its requests in each of 10 seeds."""
    follows = []
    for seed in range(10):
        rng, router, seen = random.Random(seed), Router(policy(), "s", has_plain=True), {}
        drive(router, 40, loses, rng=rng, seen=seen)
        assert router.classes["rewrite"].side == PLAIN
        _, moves, after = drive(router, 200, pays, start=40, rng=rng, seen=seen, name="rewrite")
        follows.append(settled(after, SPEC))
        assert all(explain_route(d, cited).reproduces for d, cited in moves)
    print("requests until rewrite went to spec on its own:", sorted(follows))
    assert max(follows) <= FOLLOWS_WITHIN, follows
