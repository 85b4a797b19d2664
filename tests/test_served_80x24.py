"""What a new user's trial at 80×24 found in the served view (issue 51): the proxy's notice about draft
counts cut mid-sentence and telling an n-gram llama-server to start drafting, acceptance by position
dropping positions 5-7 of k=8, and "last 60 s" tok/s divided by the 16 s read so far. Read off the
screen through a Pilot, from events built here (the reads and replies of the trial's shapes)."""

from __future__ import annotations

from specmon.events.schema import RequestTimed, ServerScraped
from specmon.metrics import unreported
from specmon.metrics.unreported import SessionLines, notices
from specmon.tui import served_panes as sp
from specmon.tui.factory import make_app
from specmon.tui.served_state import ServedState
from events import request_timed
from test_watch_tui import T0, URL, header, prefilled, read
from waiting import screen_lines, shown_until

TRIAL_CLASSES = ("rewrite", "code-edit", "chat")  # the trial's proxy: 3 classes, every reply without draft_n


def silent_reply(i: int, cls: str) -> RequestTimed:
    """A llama-server reply with no draft_n (a request that drafted nothing, or no speculation at all)."""
    return request_timed(
        session_id="w",
        t=T0 + 10 + i,
        request_id=f"r{i}",
        prompt_class=cls,
        predicted_n=32,
        predicted_ms=620.0,
        family="llama-server",
        upstream_url=URL,
    )


def counters(t: float, drafts: int, per_pos: list[int], generated: int = 0) -> ServerScraped:
    """The upstream's /metrics as read at T0 + t: `drafts` drafts of 8 tokens, accepted as per_pos says."""
    accepted = sum(per_pos)
    return read(t, drafts, drafts * 8, accepted, per_pos, generated)


def pane_lines(app, pane_id: str) -> list[str]:
    """A pane's inner lines as the screen shows them (border and padding off, trailing blanks kept out)."""
    region = app.screen.query_one(f"#{pane_id}").region
    lines = [line[region.x + 2 : region.right - 2] for line in screen_lines(app)[region.y + 1 : region.bottom - 1]]
    return [line.rstrip() for line in lines]


async def shown(events, pane_id: str) -> list[str]:
    app = make_app(prefilled(events))
    async with app.run_test(size=(80, 24)) as pilot:
        await shown_until(pilot, lambda: app._drawn_end, "every event applied and drawn")
        return pane_lines(app, pane_id)


# -- 1. the notice about draft counts: whole at 80x24, and right for a server that drafts ---------------


async def test_the_notice_is_shown_whole_in_the_proxy_view_at_80x24():
    replies = [silent_reply(i, cls) for i, cls in enumerate(TRIAL_CLASSES)]
    lines = await shown([header("proxy"), counters(0, 0, []), counters(1, 0, []), *replies], "classes")
    words = " ".join(" ".join(lines).split())
    assert words.endswith("n/r: 127.0.0.1:8080 drafted nothing yet; does it run with --spec-type?"), lines
    assert words.endswith(unreported.pane_notice(replies[-1], None))  # the view's own words, every one on screen
    assert [line.split()[0] for line in lines[1:4]] == ["chat", "code-edit", "rewrite"]


def test_a_server_whose_counters_show_drafts_is_not_told_to_start_drafting():
    """llama-server with --spec-type ngram-simple leaves draft_n out of a reply that drafted nothing: with
    its /metrics counting drafts, the notice says these requests drafted nothing, not how to turn it on."""
    replies = [silent_reply(i, cls) for i, cls in enumerate(TRIAL_CLASSES)]
    reads = [counters(0, 0, [0] * 8), counters(30, 1, [1, 1, 1, 1, 0, 0, 0, 0])]
    (said,) = notices(replies, reads)
    assert said == (
        f"upstream {URL} (spec, llama-server) drafts (1 draft on its /metrics) but no request through the proxy "
        "drafted: it gives draft_n only to a request that drafted, so its requests are counted, not measured"
    )
    (unknown,) = notices(replies, reads[:1])  # 0 drafts read: nothing says the server drafts
    assert "if it runs without --spec-type, start it with a draft model" in unknown
    state = ServedState()
    state.apply([header("proxy"), *reads, *replies])
    assert sp.render_classes(state, 36).plain.splitlines()[-2:] == [
        "n/r: 127.0.0.1:8080 drafts, but",
        "these requests drafted nothing",
    ]


def test_the_headless_line_reads_the_counters_too():
    told = SessionLines()
    told.read(counters(0, 4, [3, 2, 1, 0, 0, 0, 0, 0]))
    said = told.observe(silent_reply(0, "chat"))
    assert said is not None and "drafts (4 drafts on its /metrics) but no request through the proxy drafted" in said


async def test_with_more_classes_than_room_the_rows_give_way_and_say_so():
    classes = ("a-chat", "b-code", "c-edit", "d-rewrite", "e-math", "f-other")
    replies = [silent_reply(i, cls) for i, cls in enumerate(classes)]
    lines = await shown([header("proxy"), counters(0, 0, []), counters(1, 0, []), *replies], "classes")
    assert lines == [
        "class      via   req  acc t/st tok/s",
        "a-chat     spec    1  n/r  N/A  51.6",
        "b-code     spec    1  n/r  N/A  51.6",
        "c-edit     spec    1  n/r  N/A  51.6",
        "… 3 more rows (log info has all)",
        "n/r: 127.0.0.1:8080 drafted nothing",
        "yet; does it run with --spec-type?",
    ]
