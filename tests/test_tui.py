"""The TUI on a recorded session: every pane shows the figures specmon.metrics computes."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from specmon.events.log import read_log
from specmon.events.schema import SessionFinished
from specmon.replay.player import ReplayFeed
from specmon.transport.channel import Subscription
from specmon.metrics.stats import class_stats
from specmon.tui.factory import make_app
from specmon.tui.feed import Feed, thread_feed
from specmon.tui.panes import render_text
from specmon.tui.screens import DecisionScreen, HelpScreen
from waiting import drawn, screen_lines, settled, shown_until, wait_for_screen

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "session-tui.specmon"
EVENTS = list(read_log(FIXTURE))
REPO = Path(__file__).resolve().parent.parent


def replay_app():
    return make_app(thread_feed(lambda: iter(EVENTS), "fixture"))


async def settle(app, pilot):
    """Until the feed has ended and the app has applied and drawn every event."""
    await shown_until(
        pilot,
        lambda: app.feed.done.is_set() and app.state.events_seen == len(EVENTS),
        "the feed ended and every event applied",
    )


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
        estimate = c.speedup_estimate(3)
        assert app.query_one("#speed").border_title == f"speed · {last_class} k=3"
        speed = pane_text(app, "speed").splitlines()
        assert speed[0].startswith(f"{estimate.ratio:.2f}×") and estimate.ratio == pytest.approx(c.speedup(3))
        assert speed[2].split()[:2] == ["spec", f"{spec.tok_per_s:.1f}"]
        assert speed[3].split()[:2] == ["plain", f"{c.baseline.tok_per_s:.1f}"]
        timing = [line.split() for line in pane_text(app, "timing").splitlines()]
        assert timing[0] == ["draft", f"{spec.draft_ms / spec.rounds:.2f}"]
        assert timing[1] == ["verify", f"{spec.verify_ms / spec.rounds:.2f}"]
        assert timing[2] == ["overhead", f"{spec.overhead_ms / spec.rounds:.2f}"]  # the report's word too
        table = app.query_one("#classes")
        rows = {
            str(table.get_row_at(i)[0]): [str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)
        }
        assert set(rows) == set(stats)
        for name, row in rows.items():
            run = stats[name].runs[3]
            rate = "N/A" if run.acceptance_rate is None else f"{run.acceptance_rate:.2f}"
            ratio = stats[name].speedup_estimate(3).ratio
            assert row[1:7] == [
                "3",
                str(run.rounds),
                str(run.empty_rounds),
                rate,
                f"{run.mean_accepted_len:.2f}",
                f"{ratio:.2f}×" + {"not yet known": "?", "noise": "!"}.get(stats[name].speedup_estimate(3).verdict, ""),
            ]
            assert row[7].strip() == "on"
        assert app.state.rounds_seen == sum(e.__class__.__name__ == "RoundVerified" for e in EVENTS)


async def test_rejection_histogram_and_metric_switch():
    app = replay_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        run = app.state.current_run()
        last_class = [e for e in EVENTS if hasattr(e, "prompt_class")][-1].prompt_class
        assert run == class_stats(EVENTS)[last_class].runs[3]  # the pane's run is the fixture's last class at k=3
        assert run.proposed_gt, "the fixture's last class drafted, so the histogram has rows"
        drafted = [
            e
            for e in EVENTS
            if e.__class__.__name__ == "RoundVerified" and e.prompt_class == last_class and e.draft_len == 3
        ]
        assert run.per_position == [
            sum(e.accepted > pos for e in drafted) / sum(len(e.proposed) > pos for e in drafted)
            for pos in range(max(len(e.proposed) for e in drafted))
        ]
        lines = pane_text(app, "rejections").splitlines()
        proposing = sum(bool(e.proposed) for e in drafted)
        assert lines[0].startswith(f"{proposing} rounds proposed; {len(drafted) - proposing} empty")
        assert lines[1].split() == ["pos", "0", "1", "2", "all", "accepted"]
        counts = [run.rejections[pos] if pos < len(run.rejections) else 0 for pos in range(3)]
        assert lines[2].split() == ["rej", *map(str, counts), str(run.all_accepted)]
        assert lines[3].split() == ["a_i", *(f"{a:.2f}"[1:] if a < 0.995 else "1.0" for a in run.per_position)]
        assert pane_text(app, "acceptance").startswith(f"acceptance rate {run.acceptance_rate:.2f} (Σacc/Σprop")
        assert app.query_one("#acceptance").border_title == f"acceptance · {last_class} k=3"
        await pilot.press("m")
        assert pane_text(app, "acceptance").startswith(f"mean accepted length {run.mean_accepted_len:.2f} (Σacc/rounds")
        await pilot.press("m")
        assert pane_text(app, "acceptance").startswith(f"α̂ {run.alpha_hat:.2f} (mean Σmin(p,q)")


async def test_text_pane_tells_accepted_corrections_and_bonus_apart():
    app = replay_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        kinds = {span.kind for span in app.state.text}
        assert {"accepted", "plain", "prompt"} <= kinds
        finished = [e for e in EVENTS if e.__class__.__name__ == "PromptFinished"]
        assert finished[-1].stop_reason == "eos" and finished[-1].text.endswith("<|im_end|>")
        shown = render_text(app.state).plain
        assert finished[-1].text.removesuffix("<|im_end|>").strip() in shown  # the end-of-turn mark is no text
        assert "<|im_end|>" not in shown


async def test_pause_stops_redrawing_but_not_ingesting():
    sub = Subscription(maxlen=10_000)
    feed = Feed(sub, "manual")
    app = make_app(feed)
    rounds = [e for e in EVENTS if e.__class__.__name__ == "RoundVerified"]
    async with app.run_test(size=(120, 40)) as pilot:
        for event in EVENTS[:3]:
            sub.offer(event)
        await drawn(app, pilot, EVENTS[:3])
        await pilot.press("p")
        before, redraws = pane_text(app, "timing"), app.redraws
        for event in EVENTS[3:]:
            sub.offer(event)
        await drawn(app, pilot, EVENTS)  # the batches that would have redrawn it are applied
        assert app.state.rounds_seen == len(rounds)  # ingested while paused
        assert pane_text(app, "timing") == before and app.redraws == redraws  # but not redrawn
        assert "VIEW PAUSED" in app.sub_title
        await pilot.press("p")
        await settled(pilot)
        assert pane_text(app, "timing") != before


async def test_skipped_events_are_shown():
    sub = Subscription(maxlen=5)
    app = make_app(Feed(sub, "tiny buffer"))
    async with app.run_test(size=(120, 40)) as pilot:
        for event in EVENTS[:20]:
            sub.offer(event)
        await shown_until(pilot, lambda: app.state.events_seen == 5, "the 5 events the buffer kept applied")
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
    cmd = (
        f"cd {REPO} && TERM=xterm-256color {REPO}/.venv/bin/specmon run --classes rewrite "
        f"--max-new-tokens 12 -k 3 --log {log}; sleep 60"
    )
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "36", cmd], check=True)
    try:
        screen = wait_for_screen(session, lambda shown: "ended at" in shown, "the run ended, on screen")
        stats = class_stats(read_log(log))["rewrite"]
        assert f"{stats.speedup_estimate(3).ratio:.2f}×" in screen
        assert "acceptance · rewrite k=3" in screen and "acceptance rate" in screen
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)

        def table_printed(shown: str) -> bool:  # its header, the rewrite row at k=3, the legend
            header = re.search(r"^class\s+k\s+prompts\s+rounds", shown, re.M)
            return bool(header and re.search(r"^rewrite\s+3\s", shown, re.M) and "prompts: decoded at that k" in shown)

        wait_for_screen(session, table_printed, "the app quit and the per-class table printed", timeout=60)
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
        await drawn(app, pilot, events)
        table = app.query_one("#decisions")
        assert table.row_count == len(decisions)
        first = decisions[0]
        assert tuple(str(cell) for cell in table.get_row_at(0)) == (
            str(first.decision_id),
            "off" if not first.speculate_to else f"k{first.k_from}→{first.k_to}",
            first.prompt_class,
        )
        cited = app.state.cited(first)
        assert [ev.round_id for ev in cited] == first.round_ids
        table.focus()
        table.move_cursor(row=0)
        await pilot.press("enter")
        await shown_until(pilot, lambda: isinstance(app.screen, DecisionScreen), "the decision's detail open")
        shown = " ".join(" ".join(line.split()) for line in screen_lines(app))  # the detail as drawn
        assert f"cited {len(first.round_ids)} rounds, {len(first.round_ids)} held" in shown


# -- snapshots at 80×24 of what issue 14 named: help, text only, the end of a run, a replay jump,
#    a policy run with decisions, and the too-small screen ---------------------------------------

POLICY_LOG = Path(__file__).resolve().parent / "fixtures" / "session-policy.specmon"
POLICY_EVENTS = list(read_log(POLICY_LOG))


def prefilled_events(events):
    sub = Subscription(maxlen=len(events) + 1)
    for event in events:
        sub.offer(event)
    feed = Feed(sub, "fixture")
    feed.done.set()
    return make_app(feed)


def _until_drawn(events):
    async def run_before(pilot):
        await drawn(pilot.app, pilot, events)

    return run_before


def test_snapshot_policy_run_with_decisions_80x24(snap_compare):
    assert snap_compare(prefilled_events(POLICY_EVENTS), terminal_size=(80, 24), run_before=_until_drawn(POLICY_EVENTS))


def test_snapshot_help_80x24(snap_compare):
    """The whole help text, replay keys included, over the dimmed replay view."""

    async def run_before(pilot):
        await drawn(pilot.app, pilot)
        await pilot.press("question_mark")
        await shown_until(pilot, lambda: isinstance(pilot.app.screen, HelpScreen), "the help screen open")

    assert snap_compare(make_app(ReplayFeed(POLICY_LOG, speed=0.0)), terminal_size=(80, 24), run_before=run_before)


def test_snapshot_text_only_80x24(snap_compare):
    async def run_before(pilot):
        await _until_drawn(POLICY_EVENTS)(pilot)
        await pilot.press("t")
        await shown_until(pilot, lambda: pilot.app.screen.query_one("#main").has_class("text-only"), "text only")

    assert snap_compare(prefilled_events(POLICY_EVENTS), terminal_size=(80, 24), run_before=run_before)


def test_snapshot_end_of_a_run_that_ends_on_newlines_80x24(snap_compare):
    end = next(
        i
        for i, e in enumerate(POLICY_EVENTS)
        if e.__class__.__name__ == "PromptFinished" and e.prompt_id == "rewrite-3"
    )
    events = POLICY_EVENTS[: end + 1] + [SessionFinished(session_id="s", t=0.0, rounds=0, reason="done")]
    assert snap_compare(prefilled_events(events), terminal_size=(80, 24), run_before=_until_drawn(events))


def test_snapshot_replay_after_a_jump_80x24(snap_compare):
    async def run_before(pilot):
        await pilot.press("space")
        await pilot.press("g", "r", "2", "0", "0", "enter")
        await shown_until(pilot, lambda: pilot.app.state.rounds_seen == 201, "the jump to round 200 taken")

    assert snap_compare(make_app(ReplayFeed(POLICY_LOG, speed=1.0)), terminal_size=(80, 24), run_before=run_before)


def test_snapshot_too_small_60x20(snap_compare):
    assert snap_compare(prefilled_events(POLICY_EVENTS), terminal_size=(60, 20), run_before=_until_drawn(POLICY_EVENTS))
