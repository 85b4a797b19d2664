"""What a new user's trial at 80×24 found in the served view (issue 51): the proxy's notice about draft
counts cut mid-sentence and telling an n-gram llama-server to start drafting, acceptance by position
dropping positions 5-7 of k=8, and "last 60 s" tok/s divided by the 16 s read so far. Read off the
screen through a Pilot, from events built here (the reads and replies of the trial's shapes)."""

from __future__ import annotations

import msgspec
import pytest

from specmon.events.schema import RequestTimed, ServerScraped, SessionFinished
from specmon.metrics import unreported
from specmon.metrics.format import clock
from specmon.metrics.unreported import Silence, notices
from specmon.proxy.tables import request_line
from specmon.tui import served_panes as sp
from specmon.tui.factory import make_app
from specmon.tui.served_app import jump_to_read
from specmon.tui.served_state import ServedState
from events import request_timed
from specmon.errors import SpecmonError
from specmon.replay.player import ReplayFeed
from test_watch_tui import T0, URL, header, prefilled, read, write_log
from waiting import screen_lines, shown_until

TRIAL_CLASSES = ("rewrite", "code-edit", "chat")  # the trial's proxy: 3 classes, every reply without draft_n


def silent_reply(i: int, cls: str) -> RequestTimed:
    """A llama-server reply with no draft_n (a request that drafted nothing, or no speculation at all)."""
    return llama_reply(i, cls)


def llama_reply(i: int, cls: str, **counts) -> RequestTimed:
    """A llama-server reply through the proxy from URL, with the draft counts given."""
    return request_timed(
        session_id="w",
        t=T0 + 10 + i,
        request_id=f"r{i}",
        prompt_class=cls,
        predicted_n=32,
        predicted_ms=620.0,
        family="llama-server",
        upstream_url=URL,
        **counts,
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
    assert words.endswith("n/r: 127.0.0.1:8080 has reported no draft yet"), lines
    assert words.endswith(unreported.said(replies[-1])[1])  # the view's own words, every one on screen
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
    told = Silence()
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
        "n/r: 127.0.0.1:8080 has reported no",
        "draft yet",
    ]


def test_with_no_room_for_a_row_nothing_is_drawn_past_the_pane():
    """The notes at the foot take the pane's lines: a `… N more rows` line would be one past its height."""
    state = ServedState()
    state.apply([header("proxy"), counters(0, 0, []), counters(1, 0, []), silent_reply(0, "chat")])
    for height in (2, 3):  # room for the rows: -1, then 0 (the notes are kept whole, as ever)
        lines = sp.render_classes(state, 36, height).plain.splitlines()
        assert lines == ["class      via   req  acc t/st tok/s", "n/r: 127.0.0.1:8080 has reported no", "draft yet"]


# -- 2. acceptance by position: every position of k=8 at 80 columns, or the ones left out counted ------

K8 = [9, 8, 6, 5, 4, 3, 2, 1]  # of 10 drafts of 8 tokens: drafts whose accepted prefix got past position i


async def test_the_totals_show_every_position_of_k8_at_80x24():
    lines = await shown([header("watch"), counters(0, 0, [0] * 8), counters(1, 10, K8)], "totals")
    assert lines[-3:] == [
        "by position 0.90 0.80 0.60 0.50 0.40",
        "            0.30 0.20 0.10",
        "",
    ]


async def test_the_position_pane_shows_every_position_of_k8_at_80x24():
    lines = await shown([header("watch"), counters(0, 0, [0] * 8), counters(1, 10, K8)], "positions")
    shown_rates = [word for line in lines for word in line.split() if word[0].isdigit() and "." in word]
    assert [line.split()[0] for line in lines[:4]] == ["0", "1", "2", "3"]
    assert [line.split()[3] for line in lines[:4]] == ["4", "5", "6", "7"]  # a second column
    assert shown_rates == ["0.90", "0.40", "0.80", "0.30", "0.60", "0.20", "0.50", "0.10"]


async def test_llama_servers_positions_no_draft_reached_are_one_cell():
    """llama-server counts a position per --draft-max (48 in the trial): those past the longest accepted
    prefix are said together, so every position is on screen."""
    per_pos = [1, 1, 1, 1] + [0] * 44
    events = [header("watch"), counters(0, 0, [0] * 48), counters(1, 1, per_pos)]
    assert (await shown(events, "totals"))[-3:] == [
        "by position 1.00 1.00 1.00 1.00",
        "            4-47: 0.00",
        "",
    ]
    bars = await shown(events, "positions")
    assert [(line.split()[0], line.split()[-1]) for line in bars] == [
        ("0", "1.00"),
        ("1", "1.00"),
        ("2", "1.00"),
        ("3", "1.00"),
        ("4-47", "0.00"),
    ]


def test_positions_that_do_not_fit_are_counted():
    rates = [0.9 - 0.03 * i for i in range(20)]  # 20 positions, every one reached by some draft
    assert sp.fitted_position_rates(rates, 36, 2) == [
        "by position 0.90 0.87 0.84 0.81 0.78",
        "            0.75 0.72 0.69 0.66 …+11",
    ]
    assert sp.fitted_position_rates(rates, 36) == [
        "by position 0.90 0.87 0.84 0.81 0.78",
        "            0.75 0.72 0.69 0.66 0.63",
        "            0.60 0.57 0.54 0.51 0.48",
        "            0.45 0.42 0.39 0.36 0.33",
    ]
    state = ServedState()  # the pane: 20 bars in 3 lines would be too short to read, so the rates alone
    state.apply([header("watch"), counters(0, 0, [0] * 20), counters(1, 100, [90 - 3 * i for i in range(20)])])
    assert sp.render_positions(state, 36, 3).plain.splitlines() == [
        "pos 0.90 0.87 0.84 0.81 0.78 0.75",
        "    0.72 0.69 0.66 0.63 0.60 0.57",
        "    0.54 0.51 0.48 0.45 0.42 …+3",  # 17 of 20 shown
    ]


# the trial's proxy: 2 drafts of llama-server's --draft-max 48, 50 of 86 accepted, 25 positions reached
TRIAL_PER_POS = [2] * 24 + [1] + [0] * 23


def trial_reads() -> list:
    return [header("proxy"), read(0, 0, 0, 0, [0] * 48, 0), read(1, 2, 86, 50, TRIAL_PER_POS, 0)]


@pytest.mark.parametrize("pane_id", ["acceptance", "totals"])
async def test_accepted_per_draft_keeps_its_value_beside_it_at_80x24(pane_id):
    """The trial saw `acceptance 0.58  accepted/draft` and `25.00` alone at column 0 of the next line."""
    lines = await shown(trial_reads(), pane_id)
    assert "acceptance 0.58" in lines
    assert "  accepted/draft 25.00" in lines
    assert "25.00" not in lines


async def test_the_totals_count_the_positions_the_pane_has_no_room_for():
    """The trial's totals showed 10 of 26 position cells and then the border: the rest unsaid."""
    lines = await shown(trial_reads(), "totals")
    assert lines[-2:] == [
        "by position 1.00 1.00 1.00 1.00 1.00",
        "            1.00 1.00 1.00 1.00 …+39",  # positions 9-47 (25-47 is one cell of 23)
    ]


def test_drafts_without_per_position_counters_draw_a_dash():
    """A page with drafts but no `_per_pos` metric (watch.exposition.read gives ()): no bar to draw,
    with or without the pane's height (max() of no labels, a division by no columns)."""
    state = ServedState()
    state.apply([header("watch"), counters(0, 0, []), counters(1, 10, [])])
    assert state.recent().drafts == 10 and state.recent().accepted_per_pos == ()
    assert sp.render_positions(state, 36).plain == "pos -"
    assert sp.render_positions(state, 36, 3).plain == "pos -"


def test_a_class_row_gives_every_position_of_its_histograms():
    """vLLM's replies give each request's acceptance by position: under its class row, on two lines."""
    reply = request_timed(
        session_id="w",
        t=T0 + 10,
        prompt_class="code",
        predicted_n=48,
        predicted_ms=400.0,
        draft_n=80,
        draft_n_accepted=38,
        spec_steps=10,
        accepted_per_pos=K8,
        family="vllm",
        upstream_url=URL,
    )
    state = ServedState()
    state.apply([header("proxy"), reply])
    assert sp.render_classes(state, 36, 7).plain.splitlines()[1:] == [
        "code       spec    1 0.47 4.80 120.0",
        "  by position 0.90 0.80 0.60 0.50",
        "              0.40 0.30 0.20 0.10",
    ]


# -- 3. "last 60 s": the tok/s over the span really read, and the span said -------------------------------

TRIAL_TOKENS = {11: 31, 12: 63, 13: 95, 14: 127}  # the trial: four replies in a row, then nothing


def reading(reads: int, start_tokens_at: int = 0, period: float = 1.0) -> list[ServerScraped]:
    """`reads` + 1 reads, one each `period` s; the trial's tokens counted from read start_tokens_at on."""
    tokens, out = 0, []
    for i in range(reads + 1):
        tokens = TRIAL_TOKENS.get(i - start_tokens_at, tokens)
        out.append(counters(i * period, 0, [], tokens))
    return out


def test_sixteen_seconds_read_are_said_as_sixteen():
    """The trial's proxy had read 16 s: 127 tokens / 16 s is right for what it read, and the line says so."""
    state = ServedState()
    state.apply([header("proxy"), *reading(16)])
    assert sp.render_rates(state, 36).plain.splitlines()[2] == "last 16 s: 0.0 drafts/s 7.9 tok/s"
    assert state.recent().tokens_per_s == pytest.approx(127 / 16)


def test_a_whole_minute_is_read_as_sixty_seconds():
    """A watch reading for 100 s (a read each 1.003 s, as the trial's drifted), the same tokens 41-44 reads in:
    the window runs from the read at or before its start, so it spans 60 s, not the 59.x s from the first
    read inside it (the trial's watch divided by 59.0 and 60.0 by turns)."""
    state = ServedState()
    state.apply([header("watch"), *reading(100, start_tokens_at=30, period=1.003)])
    w = state.recent()
    # reads 40 to 100: 40 (40.12 s) is the last at or before 100.3 - 60; from read 41 on, 31 tokens were lost
    assert (w.seconds, w.generation_tokens) == (pytest.approx(60 * 1.003), 127)
    assert sp.render_rates(state, 36).plain.splitlines()[2] == "last 60 s: 0.0 drafts/s 2.1 tok/s"


async def test_the_panes_titles_say_the_span_read():
    app = make_app(prefilled([header("proxy"), *reading(16)]))
    async with app.run_test(size=(80, 24)) as pilot:
        await shown_until(pilot, lambda: app._drawn_end, "every event applied and drawn")
        titles = screen_lines(app)[1]
    assert "acceptance · last 16 s" in titles and "by position · last 16 s" in titles


# -- trial 2: what a second new-user trial at 80x24 found ----------------------------------------------------


async def test_a_class_name_cut_to_the_column_ends_in_an_ellipsis():
    """The trial's `non-englis spec    1  n/r` read as a class of that name: a cut name says it was cut."""
    replies = [silent_reply(i, cls) for i, cls in enumerate(("chat", "non-english"))]
    lines = await shown([header("proxy"), counters(0, 0, []), counters(1, 0, []), *replies], "classes")
    assert [line.split()[0] for line in lines[1:3]] == ["chat", "non-engli…"], lines


def drafted_reply(i: int, cls: str) -> RequestTimed:
    """A llama-server reply to a request that drafted: it carries draft_n."""
    return llama_reply(i, cls, draft_n=48, draft_n_accepted=8)


# the trial's order (prx-c, prx-d): rewrite answered without draft_n, code-edit's requests drafted, then two more without
BESIDE_A_DRAFT = [silent_reply(0, "rewrite"), drafted_reply(1, "code-edit"), silent_reply(2, "chat")]


async def test_rows_left_n_r_beside_a_class_that_drafted_are_said_to_have_drafted_nothing():
    """The upstream's other requests reported draft counts, so it drafts: its requests without draft_n drafted
    nothing (the notice used to go with the first report, leaving 'n/r: no draft counts reported')."""
    events = [header("proxy"), counters(0, 0, []), counters(1, 0, []), *BESIDE_A_DRAFT, silent_reply(3, "non-english")]
    lines = await shown(events, "classes")
    assert lines[-2:] == ["n/r: 127.0.0.1:8080 drafts, but", "these requests drafted nothing"], lines
    assert "no draft counts reported" not in " ".join(lines)


async def test_before_anything_drafted_the_notice_does_not_guess_why():
    """An n-gram llama-server drafts only where it finds a match: no draft yet is no sign it lacks --spec-type."""
    lines = await shown(
        [header("proxy"), counters(0, 0, []), counters(1, 0, []), silent_reply(0, "rewrite")], "classes"
    )
    assert lines[2:4] == ["n/r: 127.0.0.1:8080 has reported no", "draft yet"], lines


def test_log_info_and_the_headless_line_say_the_same_beside_a_class_that_drafted():
    reads = [counters(0, 0, []), counters(1, 0, [])]  # its /metrics not yet counting: the replies are the evidence
    drafted_nothing = (
        f"upstream {URL} (spec, llama-server) drafts (replies of it gave draft counts) but some requests through "
        "the proxy drafted nothing: it gives draft_n only to a request that drafted, so those are counted, not measured"
    )
    assert notices(BESIDE_A_DRAFT, reads) == [drafted_nothing]
    told = Silence()
    assert [told.observe(ev) for ev in BESIDE_A_DRAFT[1:]] == [None, drafted_nothing]
    assert notices(BESIDE_A_DRAFT[1:2] + BESIDE_A_DRAFT[:1], reads) == [drafted_nothing]


def test_the_plain_side_is_a_dash_with_no_key_as_log_info_and_the_headless_line_say():
    """The plain side is not meant to draft: its row says `-`, not `n/r`, and brings up no key for n/r."""
    plain = msgspec.structs.replace(llama_reply(0, "chat"), upstream="plain")
    state = ServedState()
    state.apply([header("proxy"), drafted_reply(1, "chat"), plain])
    lines = sp.render_classes(state, 36, 7).plain.splitlines()
    assert lines[1:] == ["chat       plain   1    -  N/A  51.6", "chat       spec    1 0.17 1.33  51.6"], lines
    assert "acc=-" in request_line(plain)


def vllm_reply(i: int, cls: str, **counts) -> RequestTimed:
    return msgspec.structs.replace(llama_reply(i, cls, **counts), family="vllm")


def test_a_server_that_reports_counts_elsewhere_is_not_told_how_to_turn_them_on():
    """vLLM gave one class's replies draft counts and another's none: the headless line said nothing while
    the view and log info told it to start with --per-request-spec-decode-metrics, which it runs with."""
    replies = [vllm_reply(0, "code", draft_n=40, draft_n_accepted=20), vllm_reply(1, "chat")]
    elsewhere = (
        f"upstream {URL} (spec, vLLM) gave draft counts in other replies but none in some requests' replies: "
        "those are counted, not measured"
    )
    assert notices(replies) == [elsewhere]
    told = Silence()
    assert [told.observe(ev) for ev in replies] == [None, elsewhere]
    state = ServedState()
    state.apply([header("proxy"), *replies])
    assert sp.render_classes(state, 36).plain.splitlines()[-2:] == [
        "n/r: 127.0.0.1:8080 gave these",
        "replies no draft counts",
    ]


def test_the_headless_line_says_a_changed_verdict_once_as_log_info_ends_up_saying():
    """A silent reply before any counted one is told how to turn counts on, as the view says then; once a
    reply of it gave counts, the line says what the view and log info now say, once."""
    replies = [vllm_reply(0, "chat"), vllm_reply(1, "code", draft_n=40, draft_n_accepted=20), vllm_reply(2, "chat")]
    told = Silence()
    said = [told.observe(ev) for ev in replies]
    assert "--per-request-spec-decode-metrics" in said[0] and said[2] is None
    assert said[1] == notices(replies)[0] and "gave draft counts in other replies" in said[1]


async def test_the_server_is_said_up_since_this_view_first_read_it_not_since_it_started():
    """No server here publishes when it started (llama-server's /metrics and /props have no start time), so the
    trial's watch and proxy said `up since` two different times for one server: each its own first read."""
    lines = await shown([header("watch"), counters(5, 0, []), counters(6, 0, [])], "server")
    assert lines[0] == f"up, seen since {clock(T0 + 5)}"


PROXY_TITLE = f"proxy: http://127.0.0.1:8001/v1 -> {URL}"  # the live proxy's, as the trial's


async def test_the_proxy_title_gives_way_before_the_view_paused_alert():
    """The trial's proxy title ran past 80 columns (`… · up si…`), so p's VIEW PAUSED never showed: the
    scheme, then the proxy's own address, give way first."""
    feed = prefilled([header("proxy"), counters(0, 0, []), counters(1, 0, [])])
    feed.title = PROXY_TITLE
    app = make_app(feed)
    async with app.run_test(size=(80, 24)) as pilot:
        await shown_until(pilot, lambda: app._drawn_end, "every event applied and drawn")
        before = screen_lines(app)[0].rstrip()
        await pilot.press("p")
        await shown_until(pilot, lambda: "PAUSED" in screen_lines(app)[0], "the title says the view is paused")
        paused = screen_lines(app)[0].rstrip()
    up = f"up, seen since {clock(T0)}"
    assert before == f"proxy -> 127.0.0.1:8080 · llama-server · {up}"
    assert paused == f"proxy -> 127.0.0.1:8080 · llama-server · {up} · VIEW PAUSED"


def test_a_narrow_title_keeps_its_alerts_and_cuts_no_word_unsaid():
    state = ServedState()
    state.apply([header("proxy"), counters(0, 0, []), counters(1, 0, [])])
    whole = sp.title(state, PROXY_TITLE, ["VIEW PAUSED"], 200).plain
    assert whole == f"{PROXY_TITLE} · llama-server · up, seen since {clock(T0)} · VIEW PAUSED"
    words = set(whole.replace("http://", "").split()) | {"proxy", "up"}
    for width in range(24, len(whole)):
        shown = sp.title(state, PROXY_TITLE, ["VIEW PAUSED"], width).plain
        assert len(shown) <= width and shown.endswith(" · VIEW PAUSED"), (width, shown)
        assert all(word in words or word.endswith("…") for word in shown.split()), (width, shown)


def replayed_proxy_log(tmp_path):
    """A proxy log: a read a second for 10 s, a reply after the fourth read, and its end."""
    reads = [counters(t, t, [t] * 4) for t in range(11)]
    events = [header("proxy"), *reads[:4], drafted_reply(-6.5, "chat"), *reads[4:]]
    return write_log(
        tmp_path / "proxy.specmon", [*events, SessionFinished(session_id="w", t=T0 + 11, rounds=0, reason="done")]
    )


async def test_a_replayed_proxy_log_steps_jumps_and_changes_speed_with_its_state_in_front(tmp_path):
    """The trial's replay of a proxy log had `p pause q quit` only: n, s and g did nothing, and the play state
    came last in the title, cut at 80 columns."""
    app = make_app(ReplayFeed(replayed_proxy_log(tmp_path), speed=0.0))
    async with app.run_test(size=(80, 24)) as pilot:
        await shown_until(pilot, lambda: app.feed.done.is_set() and app._drawn_end, "the replay reached the end")
        title = lambda: screen_lines(app)[0].rstrip()  # noqa: E731
        assert title().startswith("⏸ max ev 14 · replay proxy.specmon · llama-server · finished"), title()
        assert screen_lines(app)[-1].split() == ["q", "quit", "␣", "play", "n", "step", "s", "speed", "g", "jump"]
        await pilot.press("g", *clock(T0 + 3), "enter")  # back to the fourth read: the reply is not yet in
        await shown_until(pilot, lambda: title().startswith("⏸ max ev 5 "), "the jump back to 3 s in")
        assert pane_lines(app, "totals")[0] == f"since {clock(T0)}, 3 s read" and not app.state.requests
        await pilot.press("n")  # the next read, and the reply before it
        await shown_until(pilot, lambda: title().startswith("⏸ max ev 7 "), "a step to the next read")
        assert pane_lines(app, "totals")[0] == f"since {clock(T0)}, 4 s read" and app.state.requests
        await pilot.press("s")
        await shown_until(pilot, lambda: title().startswith("⏸ 1× ev 7 "), "the speed changed to 1×")
        await pilot.press("space")
        # the play state itself: at 1× a slow machine may reach the log's end (⏸) before a redraw is looked at
        assert app.feed.playing and app.feed.speed == 1.0
        assert app._lead().startswith("▶ 1× ev ") or app.feed.done.is_set()


def test_a_jump_to_no_read_changes_nothing(tmp_path):
    feed = ReplayFeed(replayed_proxy_log(tmp_path), speed=0.0)
    read_all = len(feed.drain())
    with pytest.raises(SpecmonError, match="no read at or after"):
        jump_to_read(feed, clock(T0 - 1))  # a time of day before the log began is the next day's
    with pytest.raises(SpecmonError, match="use HH:MM:SS"):
        jump_to_read(feed, "3pm")
    assert feed.position == read_all == 14 and not feed.restarted


def test_a_jump_to_the_minute_the_log_began_finds_its_first_read(tmp_path):
    """`HH:MM` of the log's first minute, begun at :30, was read as :00 < the start, so the next day's."""
    began = msgspec.structs.replace(header("proxy"), t=T0 + 30)  # T0 is on a whole minute
    log = write_log(tmp_path / "mid.specmon", [began, counters(31, 0, []), counters(32, 1, [1])])
    feed = ReplayFeed(log, speed=0.0)
    assert jump_to_read(feed, clock(T0)[:5])[-1].t == T0 + 31
    with pytest.raises(SpecmonError, match="no read at or after"):
        jump_to_read(feed, clock(T0 - 60)[:5])  # the minute before it began: the next day's
