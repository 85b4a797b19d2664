"""The requests pane on a recorded serve session (tests/fixtures/session-serve.specmon, made by
scripts/record_serve_fixture.py): what it shows equals what the log says, it takes the text's row
only in a serving session, and a serving session needs 24 rows. The live server: test_serve_tui.py."""

from __future__ import annotations

import statistics
from pathlib import Path

from specmon.events.log import read_log
from specmon.events.schema import PromptFinished, PromptStarted, QueueSample, RoundVerified
from specmon.replay.player import ReplayFeed
from specmon.tui.factory import make_app
from specmon.tui.requests import requests_subtitle, seconds, short_id
from specmon.tui.state import ViewState
from test_tui_view import POLICY_EVENTS, prefilled, region_lines
from waiting import drawn, resized, screen_lines

SERVE_LOG = Path(__file__).resolve().parent / "fixtures" / "session-serve.specmon"
SERVE_EVENTS = list(read_log(SERVE_LOG))
STARTED = [e for e in SERVE_EVENTS if isinstance(e, PromptStarted)]
SECOND = STARTED[1].prompt_id  # decoded while two more wait behind it


def ttft_from_log(request_id: str, events=SERVE_EVENTS) -> float:
    """First round's time minus the time the request joined the queue, read straight from the log."""
    arrived = next(e.arrived for e in events if isinstance(e, QueueSample) and e.request_id == request_id)
    first = next(e.t for e in events if isinstance(e, RoundVerified) and e.prompt_id == request_id)
    return first - arrived


def ttft_foot(ttfts: list[float]) -> str:
    """The pane's bottom border as it must read: the last time to first token and the median."""
    return f" ttft last {seconds(ttfts[-1])} · median {seconds(statistics.median(ttfts))} of {len(ttfts)} ─╯"


def inside(line: str) -> str:
    """A pane line's text, without its border and padding."""
    return line.split("│")[1].strip()


def mid_second_request(rounds: int = 4) -> list:
    """The log up to the second request's fourth round: it decodes, two wait, one was served."""
    seen = 0
    for i, e in enumerate(SERVE_EVENTS):
        seen += isinstance(e, RoundVerified) and e.prompt_id == SECOND
        if seen == rounds:
            return SERVE_EVENTS[: i + 1]
    raise AssertionError("the fixture's second request has too few rounds")


def test_the_fixture_is_one_request_decoding_while_three_wait():
    samples = [e for e in SERVE_EVENTS if isinstance(e, QueueSample)]
    assert [s.waiting for s in samples] == [0, 0, 3, 2, 1, 0, 0]
    assert list(dict.fromkeys(s.request_id for s in samples if s.request_id)) == [s.prompt_id for s in STARTED]
    assert [s.prompt_class for s in STARTED] == ["rewrite", "code-edit", "chat", "chat"]
    assert [s.endpoint for s in samples if s.request_id][-1] == "completion"


def test_the_fold_follows_the_queue_and_times_first_tokens_from_the_log():
    state = ViewState()
    for event in SERVE_EVENTS:
        state.apply([event])
        if isinstance(event, QueueSample):
            assert state.requests.waiting == event.waiting
            assert (state.requests.in_flight.request_id if state.requests.in_flight else "") == event.request_id
    requests = state.requests
    assert requests.in_flight is None and requests.served == 4 and requests.cancelled == 0
    assert list(requests.ttfts) == [ttft_from_log(s.prompt_id) for s in STARTED]
    median = statistics.median(ttft_from_log(s.prompt_id) for s in STARTED)
    assert requests_subtitle(requests).endswith(f" · median {seconds(median)} of {len(STARTED)}")


async def test_the_pane_shows_the_request_in_flight_as_the_log_says_at_80x24():
    events = mid_second_request()
    app = prefilled(events)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, events)
        pane = region_lines(app, "requests")
    rounds = [e for e in events if isinstance(e, RoundVerified) and e.prompt_id == SECOND]
    arrived = next(e.arrived for e in events if isinstance(e, QueueSample) and e.request_id == SECOND)
    ttfts = [ttft_from_log(s.prompt_id) for s in STARTED[:2]]
    assert len(pane) == 3 and pane[0].startswith("╭─ requests · 2 waiting · 1 served ─")
    tokens = sum(len(r.emitted) for r in rounds)
    assert inside(pane[1]) == (
        f"▶ chat {short_id(SECOND)} [code-edit] k={rounds[-1].draft_len} · "
        f"{tokens}/{STARTED[1].max_new_tokens} tok · {seconds(events[-1].t - arrived)}"
    )
    assert pane[2].endswith(ttft_foot(ttfts))


async def test_a_replayed_serve_log_ends_idle_with_every_request_served():
    app = make_app(ReplayFeed(SERVE_LOG, speed=0.0))
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot)
        pane = region_lines(app, "requests")
    ttfts = [ttft_from_log(s.prompt_id) for s in STARTED]
    served = sum(isinstance(e, PromptFinished) and e.stop_reason != "cancelled" for e in SERVE_EVENTS)
    assert served == 4 and pane[0].startswith("╭─ requests · 0 waiting ─")
    assert inside(pane[1]) == "idle, 4 requests served"
    assert pane[2].endswith(ttft_foot(ttfts))


async def test_a_run_session_keeps_its_layout_and_has_no_requests_pane():
    app = prefilled(POLICY_EVENTS)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, POLICY_EVENTS)
        assert app.state.requests is None
        assert app.screen.query_one("#requests").region.height == 0
        assert app.screen.query_one("#text-box").region.height == 4  # the text keeps the last rows: 2 lines
        assert "requests" not in "\n".join(screen_lines(app))


async def test_serving_takes_the_text_row_at_80x24_and_needs_24_rows():
    events = mid_second_request()
    app = prefilled(events)
    async with app.run_test(size=(80, 23)) as pilot:
        await drawn(app, pilot, events)
        assert "terminal too small: 80×23, need 70×24" in "\n".join(screen_lines(app))
        await resized(pilot, 70, 24)
        lines = screen_lines(app)
        assert "too small" not in "\n".join(lines)
        assert lines[-2].startswith("╰") and lines[-2].endswith("╯")  # the pane's foot, above the footer
        assert lines[-3].startswith(f"│ ▶ chat {short_id(SECOND)} [code-edit]")
        assert app.screen.query_one("#text-box").region.height == 0
        await resized(pilot, 120, 40)
        assert app.screen.query_one("#requests").region.height == 3
        assert app.screen.query_one("#text-box").region.height == 40 - 2 - 23  # the rest of the screen


def test_snapshot_serve_request_in_flight_80x24(snap_compare):
    events = mid_second_request()

    async def run_before(pilot):
        await drawn(pilot.app, pilot, events)

    assert snap_compare(prefilled(events, "serve"), terminal_size=(80, 24), run_before=run_before)


async def test_the_requests_pane_says_where_clients_reach_the_server_at_80x24():
    """`specmon serve` sets the feed's URL: the pane's title leads with it, the queue after it."""
    events = mid_second_request()
    app = prefilled(events)
    app.feed.url = "http://127.0.0.1:8000/v1"
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, events)
        pane = region_lines(app, "requests")
    assert pane[0].startswith("╭─ requests on http://127.0.0.1:8000/v1 · 2 waiting · 1 served ─")


def test_a_long_address_leaves_the_queue_out_before_it_is_cut():
    from specmon.tui.requests import Requests, requests_title

    url = "http://[2001:db8::1234:5678:9abc]:8000/v1"
    head = f"requests on {url}"
    for width in range(20, 90):
        title = requests_title(Requests(), width, url)
        assert len(title) <= width and (title in (f"{head} · 0 waiting", head) or title.endswith("…")), title
        assert ("waiting" in title) == (len(f"{head} · 0 waiting") <= width)  # the queue goes before the address
    assert requests_title(None, 80, "") == "requests"


def test_one_request_served_is_one_request():
    from specmon.tui.requests import Requests, render_requests

    requests = Requests()
    requests.served = 1
    assert "idle, 1 request served" in render_requests(requests).plain


async def test_text_only_shows_the_text_in_a_serving_session_at_80x24():
    """`t` gives the text the whole screen in serve and attach too (at 80x24 a serving layout hides the
    text pane, and that rule outranked text-only: the screen went blank)."""
    events = mid_second_request()
    app = prefilled(events)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, events)
        await pilot.press("t")
        await pilot.pause()
        box = app.query_one("#text-box")
        assert box.display and box.region.height >= 18, box.region


async def test_a_refused_edit_in_a_serving_session_at_80x24_hides_no_panes_foot():
    from test_tui_policy import ERROR, refused

    events = mid_second_request() + [refused()]
    app = prefilled(events)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, events)
        screen = screen_lines(app)
        classes, decisions = region_lines(app, "classes"), region_lines(app, "decisions")
        foot = screen.index(classes[-1] + decisions[-1])  # both panes' feet, whole, on screen
        assert classes[-1].startswith("╰") and decisions[-1].endswith("╯")
        assert screen[foot + 1].startswith("─ policy edit refused ─")
        said = " ".join(" ".join(line.split()) for line in screen[foot + 2 : foot + 5])
        assert " ".join(ERROR.split()[:6]) in said, screen
