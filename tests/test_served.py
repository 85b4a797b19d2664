"""Figures of traffic specmon did not decode (metrics.served) and the driverless session that logs them."""

import msgspec
import pytest

from specmon.events.log import read_log
from specmon.events.schema import ServerScraped, SessionFinished, SessionStarted
from specmon.metrics import served
from specmon.transport.session import observer_session
from events import request_timed, session_started


def scrape(t, drafts, tokens, accepted, per_pos, generated=None, **kw):
    return ServerScraped(
        session_id="w",
        t=t,
        url="http://127.0.0.1:8080",
        kind="llama-server",
        drafts=drafts,
        draft_tokens=tokens,
        accepted=accepted,
        accepted_per_pos=per_pos,
        generation_tokens=generated,
        **kw,
    )


def test_a_window_is_the_counters_deltas_and_its_rates_are_sums_over_it():
    w = served.window(scrape(10.0, 4, 16, 6, [4, 2, 0, 0], 30), scrape(12.0, 14, 56, 26, [12, 8, 4, 2], 110))
    assert (w.drafts, w.draft_tokens, w.accepted, w.accepted_per_pos) == (10, 40, 20, (8, 6, 4, 2))
    assert w.seconds == 2.0 and w.start == 10.0
    assert w.acceptance == 0.5 and w.accepted_per_draft == 2.0
    assert w.position_rates() == [0.8, 0.6, 0.4, 0.2]
    assert w.drafts_per_s == 5.0 and w.tokens_per_s == 40.0


def test_positions_a_server_added_later_count_from_zero():
    w = served.window(scrape(0.0, 2, 8, 2, [2]), scrape(1.0, 6, 24, 7, [5, 2]))
    assert w.accepted_per_pos == (3, 2)


def test_positions_are_written_one_way_for_the_view_and_the_lines():
    """A trailing run of positions no draft got past is one cell; the view's and the lines' words are one's."""
    rates = [1.0, 0.5, 0.25, 0.0, 0.0, 0.0]
    cells = served.position_cells(rates)
    assert cells == [("0", 1.0, 1), ("1", 0.5, 1), ("2", 0.25, 1), ("3-5", 0.0, 3)]
    assert [served.position_cell_text(*cell) for cell in cells] == ["1.00", "0.50", "0.25", "3-5: 0.00"]
    assert served.position_cells([None] * 4) == [("0-3", None, 4)]  # a window without drafts


def test_no_window_spans_a_restart_or_a_failed_read():
    up = scrape(0.0, 50, 200, 90, [40, 30, 20])
    assert served.window(up, scrape(5.0, 3, 12, 4, [3, 1, 0])) is None  # counters went down
    assert served.window(up, scrape(5.0, 50, 200, 90, [40, 30])) is None  # a position vanished
    down = ServerScraped(session_id="w", t=3.0, url="u", kind="llama-server", error="connection refused")
    assert served.window(up, down) is None and served.window(down, up) is None
    assert served.window(up, scrape(5.0, None, None, None, [])) is None  # no speculative counters


def test_the_total_sums_each_run_between_restarts():
    scrapes = [
        scrape(0.0, 10, 40, 20, [8, 6, 4, 2], 100),
        scrape(1.0, 20, 80, 30, [15, 9, 4, 2], 150),
        ServerScraped(session_id="w", t=2.0, url="u", kind="llama-server", error="connection refused"),
        scrape(3.0, 1, 4, 1, [1, 0, 0, 0], 5),  # restarted
        scrape(4.0, 5, 20, 9, [4, 3, 1, 1], 40),
    ]
    assert [len(r) for r in served.runs(scrapes)] == [2, 2]
    t = served.total(scrapes)  # the first run from its first read; the restarted one from zero
    assert (t.drafts, t.draft_tokens, t.accepted, t.generation_tokens) == (10 + 5, 40 + 20, 10 + 9, 50 + 40)
    assert t.accepted_per_pos == (7 + 4, 3 + 3, 0 + 1, 0 + 1) and t.seconds == 2.0
    assert served.total(scrapes[:1]) is None  # one scrape is no window


def request(cls, upstream, predicted, ms, drafted, accepted, status=200):
    return request_timed(
        session_id="p",
        request_id=f"r{predicted}",
        prompt_class=cls,
        upstream=upstream,
        status=status,
        predicted_n=predicted,
        predicted_ms=ms,
        draft_n=drafted,
        draft_n_accepted=accepted,
    )


def test_per_class_sums_of_timings_give_acceptance_tokens_per_step_and_goodput():
    events = [
        request("code", "spec", 40, 400.0, 48, 24),
        request("code", "spec", 20, 100.0, 16, 6),
        request("code", "spec", 9, 9.0, 9, 9, status=500),  # failed: not counted
        request("chat", "plain", 30, 300.0, None, None),
    ]
    from events import tally_of

    sums = tally_of(events).totals
    code = sums[("code", "spec")]
    assert (code.requests, code.predicted_n, code.draft_n, code.draft_n_accepted) == (2, 60, 64, 30)
    assert code.acceptance == pytest.approx(30 / 64)
    assert code.steps == 30 and code.tokens_per_step == 2.0
    assert code.tok_per_s == pytest.approx(60 / 500.0 * 1e3)
    chat = sums[("chat", "plain")]
    assert chat.acceptance is None and chat.tokens_per_step is None  # no reply reported drafts: not 1.0


def test_an_observer_session_logs_its_header_what_it_publishes_and_how_it_ended(tmp_path):
    def header(session_id):
        return session_started(
            session_id=session_id,
            specmon_version="t",
            profile_name="watch",
            backend="watch",
            target="http://127.0.0.1:8080",
            drafter="",
            dtype="",
            device="",
        )

    with observer_session(header, tmp_path / "w.specmon", serve=False, announce=False) as session:
        session.channel.publish(msgspec.structs.replace(scrape(1.0, 1, 4, 2, [1, 1]), session_id=session.session_id))
    events = list(read_log(tmp_path / "w.specmon"))
    assert [type(e) for e in events] == [SessionStarted, ServerScraped, SessionFinished]
    assert events[0].session_id == events[1].session_id == session.session_id != ""
    assert events[2].reason == "done" and events[2].rounds == 0


def test_a_server_that_was_gone_started_again_though_its_counters_passed_the_old_ones():
    """Refused, then loading, then counters higher than before the outage: a restart, not a window of
    new minus old (a request the new server finished before the first good read once hid it)."""
    gone = ServerScraped(session_id="w", t=2.0, url="u", kind="llama-server", error="down: connection refused")
    loading = ServerScraped(
        session_id="w", t=3.0, url="u", kind="llama-server", error="HTTP 503 from u/metrics: not ready (still loading)"
    )
    scrapes = [
        scrape(0.0, 2, 8, 8, [2, 2]),
        scrape(1.0, 4, 16, 16, [4, 4]),
        gone,
        loading,
        scrape(4.0, 5, 20, 20, [5, 5]),
    ]
    scrapes.append(scrape(5.0, 7, 28, 28, [7, 7]))
    assert [len(r) for r in served.runs(scrapes)] == [2, 2]
    assert served.total(scrapes).drafts == 2 + 7  # the new server's drafts from its start, not 7 - 4
    slow = ServerScraped(session_id="w", t=2.0, url="u", kind="llama-server", error="down: timed out")
    assert [len(r) for r in served.runs([scrapes[0], scrapes[1], slow, scrapes[4]])] == [3]  # a blip: no restart
