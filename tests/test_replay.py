"""Replay shows what the live run showed; what-if changes exactly what the other policy changes."""

from pathlib import Path

import msgspec
import pytest

from specmon.errors import SpecmonError
from specmon.events.log import read_log
from specmon.events.schema import Decision, RoundVerified, ServerScraped
from specmon.metrics.stats import class_stats, summary
from specmon.policy.schema import parse_policy
from specmon.replay.player import ReplayFeed
from specmon.replay.whatif import what_if
from specmon.tui.factory import make_app
from specmon.tui.state import ViewState
from waiting import drawn, screen_lines, settled, shown_until

REPO = Path(__file__).resolve().parent.parent
POLICY_LOG = REPO / "tests" / "fixtures" / "session-policy.specmon"
QUICK_POLICY = (REPO / "policies" / "default.toml").read_text()


def fold(feed: ReplayFeed) -> ViewState:
    state = ViewState()
    while not feed.done.is_set():
        state.apply(feed.drain())
    return state


def test_replay_equals_the_live_run(live_session):
    live = live_session.events
    replayed = fold(ReplayFeed(live_session.log_path))
    assert summary(replayed.classes) == summary(class_stats(live))
    live_decisions = [e for e in live if isinstance(e, Decision)]
    assert live_decisions, "the session should have made decisions"
    assert replayed.decisions == live_decisions
    for name, stats in replayed.classes.items():
        for k, run in stats.runs.items():
            live_run = class_stats(live)[name].runs[k]
            assert (run.rejections, run.all_accepted, run.per_position) == (
                live_run.rejections,
                live_run.all_accepted,
                live_run.per_position,
            )


def test_what_if_with_the_same_policy_changes_nothing(live_session, tmp_path):
    diffs = what_if(live_session.log_path, parse_policy(QUICK_POLICY, "same.toml"))
    assert not any(d.logged != d.other for d in diffs.values())


def test_what_if_turning_one_class_off_leaves_it_no_decision(live_session):
    decided = {e.prompt_class for e in live_session.events if isinstance(e, Decision)}
    victim = sorted(decided)[0]
    text = QUICK_POLICY
    start = text.index(f'name = "{victim}"')
    end = text.index("draft_len", start)
    other = parse_policy(text[:end] + 'speculate = "off"\n' + text[end:], "off.toml")
    diffs = what_if(live_session.log_path, other)
    # the other classes learn from the session's rates too, so they may differ; the victim decides nothing
    assert diffs[victim].logged != diffs[victim].other and diffs[victim].logged and diffs[victim].other == []


def test_what_if_marks_draft_lengths_the_log_never_ran(live_session):
    other = parse_policy(QUICK_POLICY.replace("draft_len = 8", "draft_len = 12"), "longer.toml")
    diffs = what_if(live_session.log_path, other)
    assert diffs and all(d.missing == {12} for d in diffs.values())  # the log drafted 8 at most
    assert any(d.logged for d in diffs.values())


def test_what_if_refuses_a_log_decided_by_a_retired_rule_in_one_line():
    with pytest.raises(SpecmonError, match="^[^\n]*decision 0 was made by a rule specmon has retired[^\n]*$"):
        what_if(POLICY_LOG, parse_policy(QUICK_POLICY, "quick.toml"))


def test_damaged_log_replays_up_to_the_damage(tmp_path):
    raw = POLICY_LOG.read_bytes()
    damaged = tmp_path / "d.specmon"
    damaged.write_bytes(raw[: len(raw) // 2])
    feed = ReplayFeed(damaged)
    state = fold(feed)
    assert state.rounds_seen > 0 and "damaged at byte" in feed.error


def test_both_replays_take_their_keys_and_lead_from_one_place():
    """The round view's replay and a served log's have one set of replay keys (ReplayKeys): the same keys
    to the same actions, the served one stepping a read and jumping to a read's time where the other
    steps a round."""
    from specmon.tui.app import ReplayApp
    from specmon.tui.replay_keys import ReplayKeys
    from specmon.tui.served_app import ServedReplayApp

    for app in (ReplayApp, ServedReplayApp):
        assert issubclass(app, ReplayKeys) and app._lead is ReplayKeys._lead
        assert {b.key: b.action for b in app.BINDINGS} == {
            "space": "play_pause",
            "n": "step",
            "s": "speed",
            "g": "jump",
            "p": "toggle_pause",
        }
        assert app.action_step is ReplayKeys.action_step and app.action_jump is ReplayKeys.action_jump
    assert ReplayApp.STEPS_TO is RoundVerified and ServedReplayApp.STEPS_TO is ServerScraped


async def test_replay_controls_step_and_jump():
    rounds = [e for e in read_log(POLICY_LOG) if isinstance(e, RoundVerified)]
    decision = next(e for e in read_log(POLICY_LOG) if isinstance(e, Decision))
    feed = ReplayFeed(POLICY_LOG, speed=1.0)
    app = make_app(feed)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("space")  # pause
        seen = app.state.rounds_seen
        await pilot.press("n")
        assert app.state.rounds_seen == seen + 1
        app.apply_now(feed.jump(f"r{rounds[100].round_id}"))
        assert app.state.rounds_seen == 101
        app.apply_now(feed.jump(f"d{decision.decision_id}"))
        assert app.state.decisions == [decision]
        app.apply_now(feed.jump(f"r{rounds[5].round_id}"))  # backwards: folded again from the start
        assert app.state.rounds_seen == 6 and app.state.decisions == []
        await pilot.press("s")
        assert feed.speed == 10.0
        assert app.sub_title.startswith("⏸ 10× ev ") and not app._notifications  # said in the title, no toast


def test_report_writes_plots_holding_the_logs_numbers(tmp_path):
    import json

    from specmon.replay.report import build_report

    page = build_report(POLICY_LOG, tmp_path)
    for name in ("acceptance_by_position.png", "timing.png", "goodput_by_k.png", "acceptance_over_time.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"![{name}]({name})" in page.read_text()
    data = json.loads((tmp_path / "report.json").read_text())
    stats = class_stats(read_log(POLICY_LOG))
    for cls, s in stats.items():
        for k, run in s.runs.items():
            assert data["goodput_tok_per_s"][cls][str(k)] == pytest.approx(run.tok_per_s)
            assert data["timing_ms"][cls][str(k)][1] == pytest.approx(run.verify_ms / run.rounds)
            if k:
                assert data["acceptance_by_position"][cls][str(k)] == pytest.approx(run.per_position)
    assert data["summary"] == json.loads(json.dumps(summary(stats)))
    logged = [e for e in read_log(POLICY_LOG) if isinstance(e, Decision)]
    assert [h["id"] for h in data["policy"] if h["kind"] == "decision"] == [d.decision_id for d in logged]


def test_report_says_what_each_decision_changed_and_each_reload_and_refusal(tmp_path):
    from specmon.events.log import LogWriter
    from specmon.events.schema import PolicyLoaded
    from specmon.replay.report import build_report

    events = list(read_log(POLICY_LOG))
    first = next(e for e in events if isinstance(e, PolicyLoaded))
    at = [i for i, e in enumerate(events) if isinstance(e, RoundVerified)][299]  # after the 300th round
    reload = msgspec.structs.replace(first, sha256="f" * 64, changed=["rewrite"])
    refused = msgspec.structs.replace(first, sha256="", accepted=False, error="line 3: k must be 0-16\nmore")
    events[at + 1 : at + 1] = [reload, refused]
    with LogWriter(tmp_path / "reloaded.specmon") as writer:
        for event in events:
            writer.write(event)
    page = build_report(tmp_path / "reloaded.specmon", tmp_path / "report").read_text()
    items = page.split("## Policy\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert items[0] == f"- after round 0: policy {first.sha256[:8]} in force"
    assert "- after round 64: d0 [chat] speculation on->off, by policy.min_gain from 64 rounds" in items
    assert items.index("- after round 300: policy ffffffff reloaded; it changed rewrite") + 1 == items.index(
        "- after round 300: an edit refused, the policy in force kept: line 3: k must be 0-16"
    )


def test_report_plots_measured_k_as_points_with_intervals_from_zero_and_says_why_a_plot_is_empty(tmp_path, monkeypatch):
    import json

    from specmon.replay import report

    figures = {}
    monkeypatch.setattr(report, "save_figure", lambda fig, path: figures.setdefault(path.name, fig))
    report.build_report(POLICY_LOG, tmp_path)
    data = json.loads((tmp_path / "report.json").read_text())
    stats = class_stats(read_log(POLICY_LOG))
    # a panel per class at its own k: on one axis a policy's classes, each at its own k, stood side by side
    panels = [ax for ax in figures["goodput_by_k.png"].axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == list(stats)  # chat, code-new, code-edit, rewrite, non-english
    for ax, (name, s) in zip(panels, stats.items()):
        measured = sorted(k for k, run in s.runs.items() if run.tok_per_s is not None)
        points = sorted((float(x), float(y)) for c in ax.containers for x, y in c.lines[0].get_xydata())
        assert points == [(k, pytest.approx(data["goodput_tok_per_s"][name][str(k)])) for k in measured]
        assert list(ax.get_xticks()) == measured and ax.get_ylim()[0] == 0
        assert not ax.lines or all(line.get_linestyle() in ("None", "") for line in ax.lines)  # no lines between k
    assert len({ax.get_ylim() for ax in panels}) == 1  # one y scale: panels compare by height
    for cls, s in stats.items():
        for k, run in s.runs.items():
            span = data["goodput_interval_tok_per_s"][cls][str(k)]
            if run.prompt_totals.prompts >= 2:
                assert span[0] <= run.tok_per_s <= span[1]
            else:
                assert span is None
    proposing = {
        name: sum(
            bool(e.proposed) for e in read_log(POLICY_LOG) if isinstance(e, RoundVerified) and e.prompt_class == name
        )
        for name in stats
    }
    assert max(proposing.values()) < report.WINDOW  # this log has no full block: the plot must say why
    name, most = max(proposing.items(), key=lambda kv: kv[1])
    why = data["acceptance_over_time_empty"]
    assert (
        why == f"no class has {report.WINDOW} rounds that proposed drafts (one point per {report.WINDOW}); "
        f"the most is {most}, in {name}"
    )
    (over_time,) = figures["acceptance_over_time.png"].axes
    assert [t.get_text() for t in over_time.texts] == [why.replace("; ", ";\n")]


def test_acceptance_over_time_with_one_block_per_class_reads_on_a_rounds_axis_from_zero():
    from specmon.replay import report

    data = {"acceptance_over_time": {"rewrite": [0.9], "chat": [0.3]}, "acceptance_over_time_empty": None}
    (ax,) = report.over_time_figure(data).axes
    assert ax.get_xlim() == (0.0, report.WINDOW * 1.5)  # once -0.04..0.04 around a lone dot
    assert list(ax.get_xticks()) == [0, report.WINDOW]
    assert ax.get_ylabel() == "acceptance rate (Σaccepted / Σproposed)" and "proposed drafts" in ax.get_xlabel()
    assert [list(line.get_xydata()[0]) for line in ax.get_lines()] == [[report.WINDOW, 0.9], [report.WINDOW, 0.3]]
    assert ax.get_legend_handles_labels()[1] == ["rewrite", "chat"]


async def test_replay_app_plays_a_whole_log_to_the_end():
    feed = ReplayFeed(POLICY_LOG, speed=0.0)
    app = make_app(feed)
    async with app.run_test(size=(120, 40)) as pilot:
        await drawn(app, pilot)
        assert app.state.rounds_seen == sum(isinstance(e, RoundVerified) for e in read_log(POLICY_LOG))
        assert "ended at 01:45:29" in app.sub_title  # the SessionFinished time, in UTC (conftest)


def test_explain_reproduces_every_decision_of_a_live_policy_session(live_session):
    from specmon.policy.explain import explain_log

    explanations = explain_log(live_session.log_path)
    decisions = [e for e in live_session.events if isinstance(e, Decision)]
    assert len(explanations) == len(decisions) > 0
    assert all(e.reproduces for e in explanations), [e.detail for e in explanations if not e.reproduces]
    # decisions are taken mid-prompt: a round of the same prompt follows the decision
    events = live_session.events
    assert any(isinstance(e, Decision) and isinstance(nxt, RoundVerified) for e, nxt in zip(events, events[1:]))


async def test_a_failed_jump_leaves_the_view_and_the_position_as_they_were():
    feed = ReplayFeed(POLICY_LOG, speed=1.0)
    app = make_app(feed)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("space")  # pause
        for _ in range(3):
            await pilot.press("n")
        await settled(pilot)
        before = (
            app.state.rounds_seen,
            feed.position,
            str(app.query_one("#acceptance").render()),
            app.query_one("#classes").row_count,
        )
        assert before[0] > 0
        shown = []
        for target in ("r99999", "nonsense", "p:no-such-prompt"):
            await pilot.press("g", *target, "enter")
            error = lambda: str(app.screen.query_one("#jump-error").render())  # noqa: E731
            await shown_until(pilot, lambda: repr(target) in error(), f"{target} refused in the box")
            shown.append(" ".join(line.strip("│ ") for line in screen_lines(app)))
            await pilot.press("escape")
            assert (
                app.state.rounds_seen,
                feed.position,
                str(app.query_one("#acceptance").render()),
                app.query_one("#classes").row_count,
            ) == before, target
            assert not feed.done.is_set() and not feed.restarted and not app._notifications  # no toast
        assert "'r99999' is not in" in shown[0] and "'p:no-such-prompt' is not in" in shown[2]
        assert "'nonsense': use r<round id>" in shown[1]  # typed whole: n, s, p went to the box
        await pilot.press("n")  # stepping goes on from where it was
        assert app.state.rounds_seen == before[0] + 1
        await pilot.press("s", "s")  # as fast as possible
        await pilot.press("space")  # and play goes on to the end
        await drawn(app, pilot)
        assert app.state.rounds_seen == sum(isinstance(e, RoundVerified) for e in read_log(POLICY_LOG))


def test_jump_finds_targets_ahead_and_behind_without_losing_events():
    feed = ReplayFeed(POLICY_LOG)
    events = list(read_log(POLICY_LOG))
    rounds = [e for e in events if isinstance(e, RoundVerified)]
    state = ViewState()
    state.apply(feed.jump("r10"))
    assert state.rounds_seen == 11 and feed.position == events.index(rounds[10]) + 1
    with pytest.raises(SpecmonError):
        feed.jump("r99999")
    assert feed.position == events.index(rounds[10]) + 1 and not feed.restarted
    state.apply(feed.jump("r20"))  # ahead: only the events between
    assert state.rounds_seen == 21
    batch = feed.jump("r3")  # behind: from the start again
    assert feed.restarted and batch[-1] == rounds[3] and len(batch) == events.index(rounds[3]) + 1


def test_what_if_prices_a_log_without_a_measured_curve_as_policy_tune_fits_it():
    """A log from before the curve was measured at load: `what if` and `policy tune` fit the same
    costs on its rounds (each over its prompt's median plain step), one function for both."""
    from specmon.replay.tune import fitted_costs
    from specmon.replay.whatif import logged_costs

    events = list(read_log(REPO / "tests" / "fixtures" / "session-prompt-off.specmon"))
    fitted = fitted_costs([e for e in events if isinstance(e, RoundVerified)])
    costs = logged_costs(events)
    assert costs.verify_ms[0] == 1.0 and set(fitted) <= set(range(1, len(costs.verify_ms)))
    assert all(costs.verify_ms[n] == pytest.approx(fitted[n]) for n in fitted)
    assert 1.5 < min(fitted.values()) < 1.7  # a 2- to 9-position pass cost ~1.6 plain steps on that host
