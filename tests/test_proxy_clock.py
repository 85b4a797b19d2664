"""One definition of a timed reply (metrics.served.timing), routing on the proxy's clock where a side
gives no decode time of its own (no silent 50/50), and the end table from a bounded Tally."""

from __future__ import annotations

import io
import math
import subprocess
import sys
import tracemalloc
from pathlib import Path

import httpx
import msgspec
import pytest
from rich.console import Console

from events import request_timed
from specmon.events.log import read_log
from specmon.events.schema import Decision, RequestTimed, RouteChoice, ServerScraped
from specmon.metrics.served import PROXY_CLOCK, SERVER_CLOCK, RequestTotals, add_request, timing
from specmon.policy import route
from specmon.policy.schema import load_policy
from specmon.proxy.advice import advise
from specmon.proxy.routing import BOTH, PLAIN, SPEC
from specmon.proxy.tables import log_summary, request_line, tally_summary
from specmon.proxy.tally import WINDOW, Tally
from events import tally_of

POLICY = load_policy("default")
SLOW_S, FAST_S = 0.12, 0.06  # plain answers twice as fast as spec: a clear 2x on any clock that sees it


def rendered(renderable) -> str:
    console = Console(file=io.StringIO(), width=100, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


# -- the one rule -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fields", "clock", "tokens", "ms"),
    [
        (dict(predicted_n=40, predicted_ms=800.0, total_ms=1000.0), SERVER_CLOCK, 40, 800.0),
        (dict(predicted_n=40, predicted_ms=0.0, total_ms=1000.0), PROXY_CLOCK, 40, 1000.0),  # 0 ms: not the server's
        (dict(predicted_n=40, predicted_ms=-5.0, total_ms=1000.0), PROXY_CLOCK, 40, 1000.0),
        (dict(predicted_n=40, predicted_ms=math.nan, total_ms=1000.0), PROXY_CLOCK, 40, 1000.0),
        (dict(predicted_n=40, predicted_ms=None, total_ms=1000.0), PROXY_CLOCK, 40, 1000.0),
        (dict(predicted_n=40, stream=True, first_byte_ms=200.0, total_ms=1000.0), PROXY_CLOCK, 39, 800.0),
        (dict(predicted_n=1, stream=True, first_byte_ms=200.0, total_ms=1000.0), None, 0, 0.0),  # no token after
        (dict(predicted_n=40, predicted_ms=0.0, total_ms=0.0), None, 0, 0.0),  # a 0 ms reply on every clock
        (dict(predicted_n=0, predicted_ms=800.0, total_ms=1000.0), None, 0, 0.0),  # no tokens: nothing to time
        (dict(predicted_n=None, predicted_ms=800.0, total_ms=1000.0), None, 0, 0.0),
        (dict(predicted_n=40, predicted_ms=800.0, total_ms=1000.0, status=502), None, 0, 0.0),
    ],
)
def test_one_rule_says_whether_a_reply_is_timed_and_on_which_clock_and_every_user_agrees(fields, clock, tokens, ms):
    ev = request_timed(**fields)
    found = timing(ev)
    assert (None if found is None else (found.clock, found.tokens, found.ms)) == (clock and (clock, tokens, ms))
    totals = RequestTotals() + ev
    server = clock == SERVER_CLOCK
    assert (totals.timed, totals.proxy_only) == (int(server), int(clock == PROXY_CLOCK))
    assert route.timed(ev) is (clock is not None) and route.timed(ev, SERVER_CLOCK) is server
    assert route.request_totals([ev], SERVER_CLOCK).prompts == int(server)  # the routing's bootstrap units
    (advice,) = advise(
        tally_of([ev, request_timed(request_id="p", upstream=PLAIN, predicted_n=40, predicted_ms=900.0)])
    )
    assert advice.estimate.prompts_spec == int(clock is not None)  # the advice's, on the class's clock
    assert advice.clock == (PROXY_CLOCK if clock == PROXY_CLOCK else SERVER_CLOCK)


@pytest.mark.parametrize("decode_ms", [360.0, None])  # the server's clock; none given: the proxy's, marked
def test_a_tok_s_is_one_figure_on_the_headless_line_in_log_info_and_in_the_view(decode_ms):
    from specmon.tui.served_panes import render_classes
    from specmon.tui.served_state import ServedState

    ev = request_timed(predicted_n=40, predicted_ms=decode_ms, total_ms=360.0)  # 111.1 tok/s on either clock
    line = dict(field.split("=") for field in request_line(ev).split() if "=" in field)
    [row] = [
        row.split() for row in rendered(tally_summary(tally_of([ev]), POLICY)).splitlines() if row.startswith("chat ")
    ]
    state = ServedState()
    state.apply([ev])
    pane = render_classes(state, 36).plain.splitlines()  # the pane's width at 80x24
    [pane_row] = [row.split() for row in pane if row.startswith("chat ")]
    assert {line["tok/s"], row[-1], pane_row[-1]} == {"111.1" + ("" if decode_ms else "*")}
    assert max(map(len, pane)) <= 36, pane


def test_a_decision_logged_before_the_clock_was_recorded_reads_as_on_the_servers_clock():
    old = msgspec.msgpack.encode(["route", "both", "spec", 0.05, 1.3, 1.2, 1.4, 4, 4, 8, 8])
    assert msgspec.msgpack.decode(old, type=RouteChoice).clock == SERVER_CLOCK


def test_the_advice_never_asks_for_the_plain_side_it_was_given():
    spec = [request_timed(request_id=f"s{i}", predicted_n=40, predicted_ms=900.0) for i in range(6)]
    plain = [request_timed(request_id=f"p{i}", upstream=PLAIN, predicted_n=None) for i in range(6)]  # no usage
    (advice,) = advise(tally_of(spec + plain))
    said = advice.change(POLICY)
    assert said == "none (no plain reply said how many tokens it generated: nothing to time)", said
    (advice,) = advise(tally_of(spec))
    assert "give --plain-upstream" in advice.change(POLICY)  # no plain side at all: then it is the thing to do


# -- routing on the shared clock, through the proxy -------------------------------------------------
def proxied(tmp_path, spec_timing: bool, n: int = 40) -> tuple[list, list[str], Path]:
    """n requests of class chat through a real proxy to two vLLM stand-ins, the plain one without
    --enable-per-request-metrics (no decode time), the spec one with it or not (`spec_timing`). Spec's
    own decode times, where it gives them, say 10 ms (fast); it really answers in SLOW_S, plain in FAST_S.
    Half the requests stream (asking for usage, so each tells its tokens), alternating in pairs so that
    both sides get both kinds. The log's events, and the headless lines."""
    from standins import Figures, VllmStandin

    from specmon.proxy.server import ProxyOptions, Proxying
    from specmon.transport.session import observed_header, observer_session

    lines: list[str] = []
    log = tmp_path / "p.specmon"
    spec = VllmStandin(lambda body: Figures(34, decode_ms=10.0, delay_s=SLOW_S), timing_metrics=spec_timing)
    plain = VllmStandin(lambda body: Figures(34, decode_ms=None, delay_s=FAST_S), timing_metrics=False)
    with spec as s, plain as p:
        header = lambda sid: observed_header(sid, "proxy", s.url, "vllm", POLICY)  # noqa: E731
        with observer_session(header, log, serve=False, announce=False) as session:
            options = ProxyOptions([s.url], [p.url], port=0, scrape_s=None, line=lines.append)
            proxying = Proxying(session.session_id, session.channel.publish, POLICY, options)
            proxying.start()
            try:
                with httpx.Client(trust_env=False, timeout=30) as client:
                    for i in range(n):
                        body = {"messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 34}
                        if i // 2 % 2:
                            body |= {"stream": True, "stream_options": {"include_usage": True}}
                        reply = client.post(proxying.url + "/v1/chat/completions", json=body)
                        assert reply.status_code == 200
            finally:
                proxying.stop()
    return list(read_log(log)), lines, log


@pytest.mark.parametrize("spec_timing", [True, False], ids=["spec-gives-decode-ms", "neither-gives-decode-ms"])
def test_a_plain_side_without_decode_times_is_routed_on_the_proxys_clock_and_says_so(tmp_path, spec_timing):
    """On today's main the plain replies are never timed: the class stays at 50/50 and the advice asks for
    --plain-upstream. Here it leaves alternating within min_requests a side, to plain (twice as fast on the
    proxy's clock, though spec's own 10 ms decode times, were the clocks mixed, would send it to spec)."""
    events, lines, log = proxied(tmp_path, spec_timing)
    requests = [e for e in events if isinstance(e, RequestTimed)]
    assert all(e.predicted_ms is None for e in requests if e.upstream == PLAIN)  # the plain side gave none
    (d,) = [e for e in events if isinstance(e, Decision) and e.prompt_class == "chat"]
    lent = [e for e in events if isinstance(e, Decision) and e.prompt_class != "chat"]
    assert lent and all((e.route.side_to, e.route.clock) == (PLAIN, PROXY_CLOCK) for e in lent)  # on chat's
    c = d.route
    assert (c.side_from, c.side_to, c.clock, d.applied) == (BOTH, PLAIN, PROXY_CLOCK, True)
    before = sum(isinstance(e, RequestTimed) for e in events[: events.index(d)])
    assert max(c.spec_requests, c.plain_requests) <= POLICY.routing.min_requests
    assert before <= 2 * POLICY.routing.min_requests, before
    assert c.ratio == pytest.approx(FAST_S / SLOW_S, rel=0.3)  # ~0.5x: spec half as fast, both on one clock
    clockless = "plain gives" if spec_timing else "plain and spec give"
    assert f"on the proxy's clock ({clockless} no decode time)" in d.reason, d.reason
    assert f"class chat: {d.reason}" in lines  # the headless line says it too
    after = [e.upstream for e in requests if e.t > d.t]
    assert after.count(PLAIN) >= len(after) - 2  # left alternating: the class went plain (5% explores)

    said = subprocess.run(
        [sys.executable, "-m", "specmon.cli", "policy", "explain", str(log)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert said.returncode == 0 and said.stdout.count("reproduces") == 1 + len(lent), said.stdout + said.stderr
    assert "on the proxy's clock" in said.stdout, said.stdout

    shown = rendered(log_summary(read_log(log)))  # log info
    assert "give --plain-upstream" not in shown and "chat: spec/plain goodput 0." in shown, shown
    flat = " ".join(shown.split())  # wrapped at 100 columns
    assert "requests, on the proxy's clock" in flat and "both its sides are judged on it" in flat, shown
    rows = [line.split() for line in shown.splitlines() if line.startswith("chat ")]
    assert [row[1] for row in rows] == [PLAIN, SPEC] and all(row[-1].endswith("*") for row in rows), rows

    from specmon.tui.served_panes import render_classes
    from specmon.tui.served_state import ServedState

    state = ServedState()
    state.apply(events)
    pane = render_classes(state, 78).plain
    assert "\nchat → plain 0." in pane and "]* at " in pane and "* the proxy's clock" in pane, pane
    assert all(row.split()[-1].endswith("*") for row in pane.splitlines() if row.startswith("chat ") and "→" not in row)


# -- the end table from running sums ---------------------------------------------------------------
def traffic(n: int, seed: int = 0):
    """n requests over two classes and both sides: most timed on the server's clock, class `rewrite`'s
    plain side on the proxy's alone, and every 25th failed; with a read of the upstream now and then."""
    for i in range(n):
        name, side = ("chat", "rewrite")[i % 2], (SPEC, PLAIN)[i // 2 % 2]
        status = (200, 502, 499)[(i % 25 == 24) + (i % 50 == 49)]
        no_decode_time = name == "rewrite" and side == PLAIN
        drafted = {"draft_n": 20, "draft_n_accepted": 10 + i % 7} if side == SPEC else {}
        yield request_timed(
            t=float(i), request_id=f"r{seed}-{i}", prompt_class=name, upstream=side, status=status,
            predicted_n=40 + i % 9, predicted_ms=None if no_decode_time else 800.0 + 40 * (i % 11),
            total_ms=1100.0 + 30 * (i % 13), **drafted,
        )  # fmt: skip
        if i % 40 == 0:
            yield ServerScraped(
                session_id="s", t=float(i), url="http://spec", kind="vllm", drafts=i, draft_tokens=5 * i
            )


def test_the_tallys_end_table_is_the_one_of_every_event():
    events = list(traffic(120))
    tally = Tally()
    for i, ev in enumerate(events):
        tally.add(ev)
        if i == 60:
            rendered(tally_summary(tally, POLICY))  # read midway (a live view might): nothing changes in it
    whole = rendered(tally_summary(tally_of(events), POLICY))
    assert rendered(tally_summary(tally, POLICY)) == whole
    requests = [e for e in events if isinstance(e, RequestTimed)]
    summed: dict = {}
    for ev in requests:
        add_request(summed, ev)
    assert tally.totals == summed  # the running sums are the sums of every request
    assert tally.outcomes == {502: 2, 499: 2}
    assert "requests not counted above: client left 2, upstream broke off 2" in whole
    for advice in advise(tally):  # the bootstrap over the window is the one over every timed request
        mine = [e for e in requests if e.prompt_class == advice.prompt_class]
        again = route.estimate(
            [e for e in mine if e.upstream == SPEC], [e for e in mine if e.upstream == PLAIN], advice.clock
        )
        assert advice.estimate == again
    assert [tally.clock("chat"), tally.clock("rewrite")] == [SERVER_CLOCK, PROXY_CLOCK]
    chat_spec = next(line for line in whole.splitlines() if line.startswith("chat ") and " spec " in line)
    assert not chat_spec.endswith("*") and "rewrite: spec/plain goodput" in whole


def test_the_tally_keeps_a_window_not_every_request():
    tally = Tally()
    tracemalloc.start()
    try:
        for ev in traffic(5_000):
            tally.add(ev)
        held = tracemalloc.get_traced_memory()[0]
        for ev in traffic(5_000, seed=1):
            tally.add(ev)
        grown = tracemalloc.get_traced_memory()[0] - held
    finally:
        tracemalloc.stop()
    assert sum(t.requests for t in tally.totals.values()) + sum(tally.outcomes.values()) == 10_000  # every one
    assert sum(tally.outcomes.values()) == 400
    assert {key: len(kept) for key, kept in tally.recent.items()} == {
        (name, side): WINDOW for name in ("chat", "rewrite") for side in (SPEC, PLAIN)
    }
    assert grown < 64 * 1024, grown  # the second 5,000 requests added nothing that stays
    assert [a.estimate.prompts_spec for a in advise(tally)] == [WINDOW, WINDOW]
    assert f"over each side's last {WINDOW} requests" in rendered(tally_summary(tally, POLICY))


def test_one_reply_without_decode_time_does_not_move_a_class_to_the_proxys_clock():
    """A side whose replies give decode times and one whose timings were unreadable: still the server's
    clock; a side that gives none from the start moves the class after its second reply."""
    from specmon.proxy.routing import Router

    router = Router(load_policy("default"), "s", has_plain=True)

    def reply(i: int, side: str, decode_ms: float | None) -> RequestTimed:
        return request_timed(request_id=f"r{i}", upstream=side, predicted_n=64, predicted_ms=decode_ms, total_ms=900.0)

    for i, side in enumerate([SPEC, PLAIN, SPEC]):
        router.observe(reply(i, side, 800.0))
    router.observe(reply(3, PLAIN, None))  # one odd reply of a side that gave decode times
    assert router.clock == SERVER_CLOCK
    other = Router(load_policy("default"), "s", has_plain=True)
    other.observe(reply(0, PLAIN, None))
    assert other.clock == SERVER_CLOCK  # one reply is not yet a side that gives none
    other.observe(reply(1, PLAIN, None))
    assert other.clock == PROXY_CLOCK and other.clockless == [PLAIN]
    # a side that gives no decode time does so for every class: the next class is on the shared clock,
    # and a reply that gave its decode time does not move it back
    other.observe(request_timed(request_id="r2", prompt_class="rewrite", upstream=SPEC, predicted_n=64,
                                predicted_ms=800.0, total_ms=900.0, stream=False))  # fmt: skip
    assert (other.clock, other.clockless) == (PROXY_CLOCK, [PLAIN])


def test_a_policy_edit_restarts_the_classes_but_not_what_the_sides_are_timed_on(tmp_path):
    """The sides' clock is the server pair's, not a class's: after an edit of [routing] drops every class,
    a side that gave no decode time still gives none, and the next decision is on the proxy's clock."""
    from specmon.proxy.routing import Router

    path = tmp_path / "p.toml"
    path.write_text(load_policy("default").text)
    router = Router(load_policy(path), "s", has_plain=True)
    for i in range(2):
        router.observe(
            request_timed(request_id=f"r{i}", upstream=PLAIN, predicted_n=64, predicted_ms=None, total_ms=900.0)
        )
    assert (router.clock, router.clockless) == (PROXY_CLOCK, [PLAIN])
    path.write_text(path.read_text().replace("explore_share = 0.05", "explore_share = 0.1"))
    assert router.maybe_reload().accepted and router.classes == {} and router.clock == PROXY_CLOCK
    decisions = []
    for i in range(2, 20):
        side = router.side("chat")
        decode_ms = None if side == PLAIN else 800.0  # spec still gives its decode time, plain never
        ev = request_timed(request_id=f"r{i}", upstream=side, predicted_n=64, predicted_ms=decode_ms, total_ms=900.0)
        decisions += router.observe(ev)
    assert decisions and all(d.route.clock == PROXY_CLOCK for d in decisions)
    assert all("plain gives no decode time" in d.reason for d in decisions)
