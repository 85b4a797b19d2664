"""The TUI on a recorded session: every pane shows the figures specmon.metrics computes."""

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from specmon.transport.channel import Subscription
from specmon.events.log import read_log
from specmon.metrics.stats import class_stats
from specmon.tui.factory import make_app
from specmon.tui.feed import Feed, thread_feed
from specmon.tui.panes import render_text

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "session-tui.specmon"
EVENTS = list(read_log(FIXTURE))
REPO = Path(__file__).resolve().parent.parent


def replay_app():
    return make_app(thread_feed(lambda: iter(EVENTS), "fixture"))


async def settle(app, pilot):
    """Until the feed has ended and the app has applied and drawn every event."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (not app.feed.done.is_set() or app.state.events_seen < len(EVENTS)):
        await pilot.pause(0.05)
    await pilot.pause(0.3)  # let the redraw and the text pane's scroll after the last batch land
    await pilot.wait_for_scheduled_animations()
    await pilot.pause(0.2)


def pane_text(app, pane_id: str) -> str:
    return str(app.query_one(f"#{pane_id}").render())


async def test_panes_show_the_metrics_of_the_same_events():
    stats = class_stats(EVENTS)
    last_class = [e for e in EVENTS if hasattr(e, "prompt_class")][-1].prompt_class
    app = replay_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        c = stats[last_class]
        spec = c.runs[3]
        speed = pane_text(app, "speed")
        assert f"class {last_class}" in speed
        assert f"spec  {spec.tok_per_s:.1f} tok/s" in speed
        assert f"plain {c.baseline.tok_per_s:.1f} tok/s" in speed
        assert f"speedup {c.speedup(3):.2f}×" in speed
        timing = pane_text(app, "timing")
        assert f"draft {spec.draft_ms / spec.rounds:.2f}" in timing
        assert f"verify {spec.verify_ms / spec.rounds:.2f}" in timing
        table = app.query_one("#classes")
        rows = {table.get_row_at(i)[0]: table.get_row_at(i) for i in range(table.row_count)}
        assert set(rows) == set(stats)
        for name, row in rows.items():
            run = stats[name].runs[3]
            rate = "N/A" if run.acceptance_rate is None else f"{run.acceptance_rate:.2f}"
            assert tuple(row[1:5]) == (str(run.rounds), rate, f"{run.mean_accepted_len:.2f}", f"{stats[name].speedup(3):.2f}×")
            assert tuple(row[5:]) == ("3", "on")
        assert app.state.rounds_seen == sum(e.__class__.__name__ == "RoundVerified" for e in EVENTS)


async def test_rejection_histogram_and_metric_switch():
    app = replay_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        run = app.state.current_run()
        last_class = [e for e in EVENTS if hasattr(e, "prompt_class")][-1].prompt_class
        assert run == class_stats(EVENTS)[last_class].runs[3]  # the pane's run is the fixture's last class at k=3
        assert run.proposed_gt, "the fixture's last class drafted, so the histogram has rows"
        drafted = [e for e in EVENTS if e.__class__.__name__ == "RoundVerified"
                   and e.prompt_class == last_class and e.draft_len == 3]
        assert run.per_position == [sum(e.accepted > pos for e in drafted) / sum(len(e.proposed) > pos for e in drafted)
                                    for pos in range(max(len(e.proposed) for e in drafted))]
        lines = pane_text(app, "rejections").splitlines()
        assert lines[0].split() == ["pos", "first", "rejection", "a_i"]
        assert len(lines) == len(run.proposed_gt) + 2  # header, one row per draft position, the total
        for pos, a_i in enumerate(run.per_position):
            count = run.rejections[pos] if pos < len(run.rejections) else 0
            row = lines[pos + 1].split()
            assert [row[0], *row[-2:]] == [str(pos), str(count), f"{a_i:.2f}"]
        assert lines[-1] == f"all accepted: {run.all_accepted}"
        assert f"acceptance rate k=3: {run.acceptance_rate:.2f} (Σacc/Σprop" in pane_text(app, "acceptance")
        await pilot.press("m")
        assert f"mean accepted length k=3: {run.mean_accepted_len:.2f} (Σacc/rounds" in pane_text(app, "acceptance")
        await pilot.press("m")
        assert f"alpha-hat k=3: {run.alpha_hat:.2f} (mean Σmin(p,q)" in pane_text(app, "acceptance")


async def test_text_pane_tells_accepted_corrections_and_bonus_apart():
    app = replay_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        kinds = {span.kind for span in app.state.text}
        assert {"accepted", "plain", "prompt"} <= kinds
        finished = [e for e in EVENTS if e.__class__.__name__ == "PromptFinished"]
        assert finished[-1].text.strip()[:20] in render_text(app.state).plain


async def test_pause_stops_redrawing_but_not_ingesting():
    sub = Subscription(maxlen=10_000)
    feed = Feed(sub, "manual")
    app = make_app(feed)
    rounds = [e for e in EVENTS if e.__class__.__name__ == "RoundVerified"]
    async with app.run_test(size=(120, 40)) as pilot:
        for event in EVENTS[:3]:
            sub.offer(event)
        await pilot.pause(0.3)
        await pilot.press("p")
        before = pane_text(app, "timing")
        for event in EVENTS[3:]:
            sub.offer(event)
        await pilot.pause(0.4)
        assert app.state.rounds_seen == len(rounds)  # ingested while paused
        assert pane_text(app, "timing") == before  # but not redrawn
        assert "VIEW PAUSED" in app.sub_title
        await pilot.press("p")
        await pilot.pause(0.2)
        assert pane_text(app, "timing") != before


async def test_skipped_events_are_shown():
    sub = Subscription(maxlen=5)
    app = make_app(Feed(sub, "tiny buffer"))
    async with app.run_test(size=(120, 40)) as pilot:
        for event in EVENTS[:20]:
            sub.offer(event)
        await pilot.pause(0.3)
        assert "view skipped 15 events" in app.sub_title


def prefilled_app():
    """The whole fixture buffered before the app starts: one batch, so every frame is the same."""
    sub = Subscription(maxlen=len(EVENTS))
    for event in EVENTS:
        sub.offer(event)
    feed = Feed(sub, "fixture")
    feed.done.set()
    return make_app(feed)


def test_snapshot_80x24(snap_compare):
    assert snap_compare(prefilled_app(), terminal_size=(80, 24), run_before=_settled)


def test_snapshot_160x48(snap_compare):
    assert snap_compare(prefilled_app(), terminal_size=(160, 48), run_before=_settled)


async def _settled(pilot):
    await settle(pilot.app, pilot)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_real_tui_in_tmux_over_a_pseudo_terminal(tmp_path):
    """As a person over SSH would: a 256-colour terminal, the embedded model, a short run."""
    session = f"specmon-test-{os.getpid()}"
    log = tmp_path / "run.specmon"
    cmd = (f"cd {REPO} && TERM=xterm-256color {REPO}/.venv/bin/specmon run --classes rewrite "
           f"--max-new-tokens 12 -k 3 --log {log}; sleep 60")
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "36", cmd], check=True)
    try:
        screen = ""
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and "finished (done)" not in screen:
            time.sleep(1)
            screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout
        assert "finished (done)" in screen, screen
        stats = class_stats(read_log(log))["rewrite"]
        assert f"speedup {stats.speedup(3):.2f}×" in screen
        assert "acceptance rate k=3" in screen and "rewrite" in screen
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        time.sleep(2)
        after = subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout
        assert "rate = accepted/proposed" in after  # the app quit and the table was printed
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


async def test_decisions_pane_lists_decisions_and_shows_the_rounds_they_cite():
    policy_log = Path(__file__).resolve().parent / "fixtures" / "session-policy.specmon"
    events = list(read_log(policy_log))
    decisions = [e for e in events if e.__class__.__name__ == "Decision"]
    sub = Subscription(maxlen=len(events))
    for event in events:
        sub.offer(event)
    feed = Feed(sub, "policy session")
    feed.done.set()
    app = make_app(feed)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.5)
        table = app.query_one("#decisions")
        assert table.row_count == len(decisions)
        first = decisions[0]
        assert tuple(table.get_row_at(0)) == (str(first.decision_id), first.prompt_class,
                                             "off" if not first.speculate_to else f"k {first.k_from}→{first.k_to}")
        cited = app.state.cited(first)
        assert [ev.round_id for ev in cited] == first.round_ids
        table.focus()
        await pilot.press("enter")
        await pilot.pause(0.2)
        shown = [n.message for n in app._notifications]
        assert any(f"cited {len(first.round_ids)} rounds, {len(first.round_ids)} held" in m for m in shown)
