"""The served-traffic view (watch, proxy): its panes from synthesized reads and requests, the app the
factory picks from the session header (live, attached, replayed), legible at 80x24."""

from __future__ import annotations

import pytest

from specmon.events.log import LogWriter
from specmon.events.schema import RequestTimed, ServerScraped, SessionFinished, SessionStarted
from specmon.replay.player import ReplayFeed
from specmon.transport.channel import Subscription
from specmon.tui import served_panes as sp
from specmon.tui.app import SpecmonApp
from specmon.tui.factory import make_app
from specmon.tui.feed import Feed
from specmon.tui.served_app import ServedApp
from specmon.tui.served_state import ServedState
from waiting import shown_until
from events import request_timed

URL = "http://127.0.0.1:8080"
T0 = 1_800_000_000.0


def header(backend: str = "watch") -> SessionStarted:
    return SessionStarted(
        session_id="w",
        t=T0,
        specmon_version="test",
        profile_name=backend,
        profile_text="",
        backend=backend,
        target=URL,
        drafter="llama-server",
        dtype="",
        device="",
    )


def read(t, drafts, tokens, accepted, per_pos, generated, running=0, waiting=0, error="") -> ServerScraped:
    if error:
        return ServerScraped(session_id="w", t=T0 + t, url=URL, kind="llama-server", error=error)
    return ServerScraped(
        session_id="w",
        t=T0 + t,
        url=URL,
        kind="llama-server",
        drafts=drafts,
        draft_tokens=tokens,
        accepted=accepted,
        accepted_per_pos=per_pos,
        generation_tokens=generated,
        running=running,
        waiting=waiting,
    )


def request(i, cls, upstream, predicted_n, predicted_ms, draft_n, accepted, status=200) -> RequestTimed:
    return request_timed(
        session_id="w",
        t=T0 + 10 + i,
        request_id=f"r{i}",
        prompt_class=cls,
        class_rule="test",
        upstream=upstream,
        endpoint="completion",
        status=status,
        predicted_n=predicted_n,
        predicted_ms=predicted_ms,
        draft_n=draft_n,
        draft_n_accepted=accepted,
    )


# a run (2 reads with 10 drafts between them), the server down, back restarted, a second run
WATCH = [
    header(),
    read(0, 0, 0, 0, [], 0),
    read(1, 10, 40, 30, [9, 8, 7, 6], 50, running=1, waiting=2),
    read(2, None, None, None, [], None, error="down: connection refused"),
    read(3, None, None, None, [], None, error="down: connection refused"),
    read(4, 2, 8, 4, [2, 1, 1, 0], 10),
    read(5, 6, 24, 12, [5, 4, 2, 1], 30, running=1),
]
REQUESTS = [
    request(0, "code", "spec", 40, 400.0, 32, 24),
    request(1, "code", "spec", 60, 500.0, 48, 36),
    request(2, "chat", "plain", 30, 600.0, 0, 0),
    request(3, "chat", "spec", 0, 0.0, 0, 0, status=502),
]


def state_of(events) -> ServedState:
    state = ServedState()
    state.apply(events)
    return state


def test_the_state_folds_reads_into_windows_runs_and_changes():
    state = state_of(WATCH)
    assert state.failed_reads == 2 and state.restarts == 1
    assert [what for _, what, _ in state.changes] == ["down", "restarted"]
    total = state.total()
    assert (total.drafts, total.draft_tokens, total.accepted) == (
        10 + 6,
        40 + 24,
        30 + 12,
    )  # the first run from its first read, the restarted one from zero
    last = state.last_window()
    assert (last.drafts, last.draft_tokens, last.accepted, last.accepted_per_pos) == (4, 16, 8, (3, 3, 1, 1))
    recent = state.recent()  # the last 60 s hold both runs: summed run by run, never across the restart
    assert recent == total


def test_the_panes_say_each_figures_span():
    state = state_of(WATCH + REQUESTS)
    assert "acceptance 0.66  accepted/draft 2.62" in sp.render_acceptance(state, 38).plain  # 42/64, 42/16
    positions = sp.render_positions(state, 38).plain.splitlines()
    assert [line.split()[-1] for line in positions] == ["0.88", "0.75", "0.56", "0.44"]  # (9+5)/16 ...
    rates = sp.render_rates(state, 38).plain
    assert "4.0 drafts/s  20.0 tok/s" in rates and "running 1  waiting 0" in rates
    server = sp.render_server(state, 38).plain
    assert server.startswith("up, seen since") and "restarted" in server and "down" in server
    assert "1 restart, 2 failed reads" in sp.render_totals(state, 38).plain.splitlines()
    rows = [
        line.split() for line in sp.render_classes(state, 38).plain.splitlines() if line.startswith(("chat", "code"))
    ]
    # class, side, requests, acceptance (0 of 0 drafted: none), tokens/step (100 / 40), tok/s (100 / 0.9 s)
    assert rows == [["chat", "plain", "1", "N/A", "1.00", "50.0"], ["code", "spec", "2", "0.75", "2.50", "111.1"]]


def test_a_down_server_is_said_in_the_title():
    state = state_of(WATCH[:4])
    title = sp.title(state, f"watch {URL}", [], 80).plain
    assert "DOWN since" in title and "llama-server" in title


def prefilled(events) -> Feed:
    sub = Subscription(maxlen=len(events) + 1)
    for ev in events:
        sub.offer(ev)
    feed = Feed(sub, f"watch {URL}")
    feed.done.set()
    return feed


async def test_a_watch_session_gets_the_served_view_legible_at_80x24():
    app = make_app(prefilled(WATCH + REQUESTS))
    assert isinstance(app, ServedApp)
    async with app.run_test(size=(80, 24)) as pilot:
        await shown_until(pilot, lambda: app.state.requests_seen == 4, "every event applied")
        shown = {pid: str(app.query_one(f"#{pid}").render()) for pid in ("acceptance", "positions", "classes")}
        assert "acceptance 0.66" in shown["acceptance"]
        assert " 0 " in shown["positions"] and "0.88" in shown["positions"]
        assert "code" in shown["classes"] and "0.75" in shown["classes"]
        assert "up, seen since" in app.sub_title


async def test_a_proxy_session_gets_the_same_view_and_a_decoding_one_does_not():
    assert isinstance(make_app(prefilled([header("proxy"), *REQUESTS])), ServedApp)
    assert isinstance(make_app(prefilled([header("torch")])), SpecmonApp)


async def test_a_replayed_watch_log_opens_in_the_served_view(tmp_path):
    log = tmp_path / "watch.specmon"
    with LogWriter(log) as writer:
        for ev in WATCH + [SessionFinished(session_id="w", t=T0 + 6, rounds=0, reason="done")]:
            writer.write(ev)
    app = make_app(ReplayFeed(log, speed=0.0))
    assert isinstance(app, ServedApp)
    async with app.run_test(size=(80, 24)) as pilot:
        await shown_until(pilot, lambda: app.state.finished is not None, "the replay reached the end")
        assert app.state.total().drafts == 16


def write_log(path, events):
    with LogWriter(path) as writer:
        for ev in events:
            writer.write(ev)
    return path


def test_log_info_and_the_report_of_a_proxy_log_have_a_served_section(tmp_path):
    import json
    import subprocess
    import sys

    events = [header("proxy"), *WATCH[1:], *REQUESTS]
    log = write_log(
        tmp_path / "proxy.specmon", [*events, SessionFinished(session_id="w", t=T0 + 20, rounds=0, reason="done")]
    )
    done = subprocess.run(
        [sys.executable, "-m", "specmon.cli", "log", "info", str(log)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert f"  served traffic   {URL} (llama-server), 6 reads: 1 restart, 2 failed reads" in lines
    [totals] = [line for line in lines if line.startswith("  totals")]
    assert "drafts 16  draft tokens 64  accepted 42  acceptance 0.66" in totals
    [code] = [line for line in lines if line.split()[:2] == ["code", "spec"]]
    # requests, drafted, accepted (the sums of the replies' timings), acceptance, tok/step, tok/s
    assert code.split()[-6:] == ["2", "80", "60", "0.75", "2.50", "111.1"]
    assert "requests not counted above: upstream broke off 1" in lines
    from specmon.replay.report import build_report

    page = build_report(log, tmp_path / "report")
    data = json.loads((tmp_path / "report" / "report.json").read_text())
    assert data["served"]["total"]["drafts"] == 16 and data["served"]["restarts"] == 1
    assert [r["class"] for r in data["served"]["classes"]] == ["chat", "code"]
    assert (
        "## Served traffic" in page.read_text()
        and "| code | spec | 2 | 80 | 60 | 0.75 | 2.50 | - | 111.1 |" in page.read_text()  # no histograms: no positions
    )


def test_the_recent_span_is_its_seconds_at_any_interval_and_sees_a_restart_behind_a_refusal():
    """Reads every 0.05 s: 'last 60 s' still covers 60 s (it once kept 600 reads, 30 s here); and a server
    that was refused, then answered with counters past the old ones, started again within the span."""
    reads = [read(i * 0.05, 10 + i, 40 + 4 * i, 20 + 2 * i, [10 + i], 100 + 5 * i) for i in range(2000)]
    state = state_of([header("watch"), *reads])
    w = state.recent()
    assert w.seconds == pytest.approx(60.0, abs=0.06) and w.drafts == 1200
    state.apply(
        [read(101.0, 0, 0, 0, [], 0, error="down: connection refused"), read(102.0, 5000, 20000, 9000, [5000], 9)]
    )
    # the span is now 42-102 s: the old run's reads from 42 s (1999 - 840 drafts), then the new run from zero
    assert state.recent().drafts == (1999 - 840) + 5000
