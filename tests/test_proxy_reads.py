"""The proxy's reads of its upstream's /metrics (proxy.reads): an upstream without Prometheus is said once,
read again only rarely and not shown as a fault; reads that changed nothing are folded (watch.fold), and
every figure the view, replay and log info compute at a logged read is the one the unfolded reads give."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
from standins import TabbyStandin, from_counts
from test_proxy import proxy
from upstream import FakeUpstream
from waiting import wait_until

from specmon.events.log import read_log
from specmon.events.schema import ServerScraped, SessionFinished
from specmon.metrics import served
from specmon.proxy import reads
from specmon.proxy.command import probe
from specmon.tui import served_panes
from specmon.metrics.served import RECENT_S
from specmon.tui.served_state import ServedState
from specmon.watch import fold
from specmon.watch.fold import ReadFold

EVERY_S = 0.05


def headless_proxy(log: Path, upstream: str, lines: list[str]):
    """A headless proxy (its request lines into `lines`) reading the upstream every EVERY_S."""
    return proxy(log, upstream, scrape_s=EVERY_S, line=lines.append, kind="")


def logged_reads(log: Path) -> list[ServerScraped]:
    return [ev for ev in read_log(log) if isinstance(ev, ServerScraped)]


def view_of(log: Path) -> ServedState:
    """The served view of the log as it stood while the proxy ran (before its SessionFinished)."""
    state = ServedState()
    state.apply([ev for ev in read_log(log) if not isinstance(ev, SessionFinished)])
    return state


def styles(text) -> set[str]:
    return {str(span.style) for span in text.spans}


# -- an upstream without /metrics --------------------------------------------------------------------------


def test_a_tabbyapi_upstream_without_metrics_is_said_once_read_rarely_and_not_a_fault(tmp_path, capsys):
    log, lines = tmp_path / "p.specmon", []
    with TabbyStandin(lambda body: from_counts(2, 1)) as tabby:
        assert probe(tabby.url, "--upstream") == "tabbyapi"  # its /health body names it
        started = time.monotonic()
        with headless_proxy(log, tabby.url, lines) as p:
            wait_until(lambda: p.reads.read_any, "the first read of /metrics")
            time.sleep(40 * EVERY_S)  # 40 intervals
        elapsed = time.monotonic() - started
    assert elapsed >= 40 * EVERY_S and tabby.metrics_asked == 1  # asked once, not every interval
    (read,) = logged_reads(log)  # one read logged, not one failed read per interval
    assert (
        read.error == f"{tabby.url} publishes no /metrics (TabbyAPI has none): the figures come from its replies only"
    )
    assert "--metrics" not in read.error  # llama-server's flag is no advice for TabbyAPI
    said = [line for line in capsys.readouterr().err.splitlines() if "/metrics" in line]
    assert said == [f"specmon: {read.error}"]  # said once, on stderr beside the request lines
    state = view_of(log)
    assert served_panes.server_state(state) == (["no /metrics: figures from its replies", "no /metrics"], "")
    title = served_panes.title(state, f"proxy -> {tabby.url}", [], 120)
    assert "NO COUNTERS" not in title.plain and "no /metrics: figures from its replies" in title.plain
    assert not any("red" in style for style in styles(title))
    pane = served_panes.render_server(state, 120)
    assert read.error in pane.plain and not any("red" in style for style in styles(pane))


def test_a_llama_server_without_metrics_is_told_to_add_it_and_read_again_once_restarted_with_it(tmp_path, monkeypatch):
    monkeypatch.setattr(reads, "NO_METRICS_RETRY_S", 0.5)  # five minutes, shortened
    log, lines = tmp_path / "p.specmon", []
    with FakeUpstream() as upstream:
        upstream.metrics_page = "absent.txt"  # as llama-server without --metrics: a 404
        assert probe(upstream.url, "--upstream") == "llama-server"
        with headless_proxy(log, upstream.url, lines) as p:
            wait_until(lambda: p.reads.read_any, "the first read of /metrics")
            time.sleep(0.3)
            assert upstream.metrics_asked == 1  # not every interval
            first = logged_reads(log)
            upstream.metrics_page = "llama-server-after.txt"  # restarted with --metrics
            wait_until(lambda: p.reads.last_counted is not None, "a read after the retry", timeout=10)
    (missing,) = first
    assert missing.error == (
        f"{upstream.url} publishes no /metrics (start llama-server with --metrics for its counters too): "
        "the figures come from its replies only"
    )
    after = logged_reads(log)
    assert after[0] == missing and after[1].error == "" and after[1].drafts == 9
    assert served_panes.server_state(view_of(log))[1] == "green"  # up, read again


def test_a_metrics_page_that_goes_away_is_a_failed_read_still_read_every_interval(tmp_path):
    """Only an upstream that had no /metrics from its first read is read rarely: one whose page went (a
    restart without --metrics) is a failed read, said once in the log (folded), and read on."""
    log, lines = tmp_path / "p.specmon", []
    with FakeUpstream() as upstream, headless_proxy(log, upstream.url, lines) as p:
        wait_until(lambda: p.reads.last_counted is not None, "the first read of /metrics")
        upstream.metrics_page = "absent.txt"
        asked = upstream.metrics_asked
        wait_until(lambda: upstream.metrics_asked >= asked + 10, "ten more reads")
    failed = [r for r in logged_reads(log) if r.error]
    assert 1 <= len(failed) <= 2 and failed[0].error.startswith("HTTP 404 ")  # the first, and the last at the end
    assert "publishes no /metrics" not in failed[0].error


# -- idle reads are folded ---------------------------------------------------------------------------------


def test_an_idle_proxys_log_grows_by_its_heartbeats_alone_a_change_is_logged_at_once_and_the_last_at_the_end(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(fold, "HEARTBEAT_S", 0.5)  # five minutes, shortened
    log = tmp_path / "p.specmon"
    with FakeUpstream() as upstream, proxy(log, upstream.url, scrape_s=EVERY_S) as p:
        wait_until(lambda: p.reads.last_counted is not None, "the first read of /metrics")
        started = p.reads.last_counted.t
        wait_until(lambda: upstream.metrics_asked >= 60, "60 reads of an idle upstream")
        idle = [r for r in logged_reads(log) if r.t <= p.reads.last_counted.t]
        idle_s = p.reads.last_counted.t - started
        upstream.metrics_page = "llama-server-after.txt"  # 9 drafts: the counters change
        wait_until(lambda: any(r.drafts == 9 for r in logged_reads(log)), "the change in the log", timeout=5)
        asked = upstream.metrics_asked
        wait_until(lambda: upstream.metrics_asked >= asked + 20, "20 idle reads after the change")
    assert len(idle) <= 1 + idle_s / 0.5 + 1  # the first, then a heartbeat each 0.5 s
    assert len(idle) < 20 and {(r.drafts, r.error) for r in idle} == {(0, "")}  # of ~60 reads taken
    every = logged_reads(log)
    changed = next(i for i, r in enumerate(every) if r.drafts == 9)
    before = every[changed - 1]
    assert before.drafts == 0 and every[changed].t - before.t < 10 * EVERY_S  # the read just before it, too
    last = p.reads.last_counted  # the latest read, logged or folded
    assert every[-1] == last  # logged at the end, though it changed nothing: log info's totals span the run
    total = served.total(every)
    assert total.drafts == 9 and total.start == every[0].t and total.seconds == pytest.approx(last.t - every[0].t)


def read_at(t: float, drafts: int, error: str = "", running: int = 0) -> ServerScraped:
    """A llama-server read: `drafts` drafts of 4 tokens, half accepted, 5 tokens generated per draft."""
    if error:
        return ServerScraped(session_id="s", t=t, url="u", kind="", error=error)
    return ServerScraped(
        session_id="s",
        t=t,
        url="u",
        kind="llama-server",
        drafts=drafts,
        draft_tokens=4 * drafts,
        accepted=2 * drafts,
        accepted_per_pos=[drafts, drafts // 2, 0, 0],
        generation_tokens=5 * drafts,
        running=running,
        waiting=0,
    )


def a_day_of_reads() -> list[ServerScraped]:
    """Reads once a second: bursts, idle stretches of minutes, a busy spell of minutes, a gauge that moves
    alone, a server down and back from 0 (a restart), and a restart seen only as counters that went down."""
    drafts, out = 0, []
    for t in range(3000):
        if t % 700 in range(10, 25) or t % 450 == 3 or t in range(2000, 2200):  # bursts, single drafts, a busy spell
            drafts += 3
        if t == 1200:
            drafts = 0  # restarted between two reads: counters went down
        if t in range(1700, 1760):
            out.append(read_at(1e6 + t, 0, "down: connection refused"))
            drafts = 0
            continue
        out.append(read_at(1e6 + t, drafts, running=int(t in range(2500, 2520))))
    return out


def folded(every: list[ServerScraped], **kw) -> list[ServerScraped]:
    reads_fold = ReadFold(**kw)
    return [r for read in every for r in reads_fold.take(read)] + reads_fold.flush()


def counts(w: served.Window | None) -> served.Window | None:
    """A window's counts alone, without its span."""
    return None if w is None else dataclasses.replace(w, start=0.0, seconds=0.0)


def test_figures_from_folded_reads_equal_those_from_every_read():
    """At each logged read, the view's (and a replay's, which steps read by read) counts, totals, restarts
    and state, and over the whole log served.total and runs (log info), are those of the unfolded reads;
    at a change the last window whole; the recent span is longer only within RECENT_S after a fold."""
    every = a_day_of_reads()
    kept = folded(every)
    assert len(kept) < len(every) / 5 and kept == sorted(kept, key=lambda r: r.t)
    assert every[-1] == kept[-1] and every[0] == kept[0]
    assert served.total(kept) == served.total(every) and served.total(every).drafts > 0
    assert [(r[0], r[-1]) for r in served.runs(kept)] == [(r[0], r[-1]) for r in served.runs(every)]
    assert len(served.runs(every)) == 3
    position = {id(r): i for i, r in enumerate(every)}
    logged = set(position[id(r)] for r in kept)
    folded_view, every_view = ServedState(), ServedState()
    exact = 0
    for i, read in enumerate(kept):  # each logged read: the unfolded view fed up to that same read
        at = position[id(read)]
        every_view.apply(every[position[id(kept[i - 1])] + 1 if i else 0 : at + 1])
        folded_view.apply([read])
        assert counts(folded_view.last_window()) == counts(every_view.last_window())
        assert counts(folded_view.recent()) == counts(every_view.recent())
        assert folded_view.total() == every_view.total() and folded_view.restarts == every_view.restarts
        assert served_panes.server_state(folded_view) == served_panes.server_state(every_view)
        if at and not read.error and not fold.same(every[at - 1], read):  # a change read: its window whole
            assert folded_view.last_window() == every_view.last_window()
        recent, unfolded = folded_view.recent(), every_view.recent()
        if recent is not None and recent.drafts:
            assert unfolded.seconds <= recent.seconds <= unfolded.seconds + RECENT_S
            start = next((j for j in range(at, -1, -1) if every[j].t <= read.t - RECENT_S), 0)  # served.recent's
            if logged.issuperset(range(start, at + 1)):  # nothing folded in the span: the same span
                exact += recent == unfolded
    assert exact > 10  # recent figures with drafts in them, compared whole
    busy = [w for w in every_view.windows if w is not None and w.drafts]  # the sparkline's marks with drafts
    # the same marks, and more of them: the view keeps its last KEPT_WINDOWS, and an idle spell folded is one
    assert busy and [w for w in folded_view.windows if w is not None and w.drafts][-len(busy) :] == busy


def test_an_idle_hour_of_reads_folds_to_its_heartbeats():
    every = [read_at(1e6 + t, 7) for t in range(3600)]
    kept = folded(every)
    assert len(kept) == 1 + 1 + 11 + 1  # the first, a minute on, a heartbeat every 5 minutes, the last
    assert kept[0] == every[0] and kept[-1] == every[-1]
    assert all(b.t - a.t <= fold.HEARTBEAT_S for a, b in zip(kept, kept[1:]))  # never more than a heartbeat apart
