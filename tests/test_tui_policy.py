"""The TUI after a policy edit: the classes pane shows the policy in force, a refused edit's whole
reason is on an 80×24 screen until a reload is taken, and a taken reload says what it changed."""

from __future__ import annotations

from pathlib import Path

from specmon.events.log import LogWriter, read_log
from decisions import gate_decision
from events import policy_loaded, prompt_started

from specmon.events.schema import ClassInForce, Decision, PolicyLoaded, PromptStarted
from specmon.replay.player import ReplayFeed
from specmon.transport.channel import Subscription
from specmon.tui import app as app_module
from specmon.tui.factory import make_app
from specmon.tui.feed import Feed
from specmon.tui.state import ViewState
from test_tui import prefilled_events
from test_tui_view import chat_in_view, prefilled, region_lines
from waiting import drawn, screen_lines, shown_until

FIXTURES = Path(__file__).resolve().parent / "fixtures"
POLICY_EVENTS = list(read_log(FIXTURES / "session-policy.specmon"))  # chat and code-new switched off by d0, d1
FIRST = next(e for e in POLICY_EVENTS if isinstance(e, PolicyLoaded))
ERROR = (
    "policies/default.toml:17:9: [classes.rewrite] draft_len must be an integer from 1 to 16 "
    'or a table {min, max, adapt}; got "four" (a string, no number)'
)  # 150 characters, as a refusal reads
CHANGED_TEXT = "changed rewrite, code-edit; in force from each class's next prompt"


def reload(classes: list[ClassInForce], changed: list[str], sha: str = "b") -> PolicyLoaded:
    """An edit taken as the fixture's session ends (its notice is news for RELOAD_NOTICE_S of the session's time)."""
    return policy_loaded(t=POLICY_EVENTS[-1].t, source=FIRST.source, sha256=sha * 64, classes=classes, changed=changed)


def refused(error: str = ERROR) -> PolicyLoaded:
    return policy_loaded(source=FIRST.source, sha256="", accepted=False, error=error)


# rewrite switched off and code-edit at k=3 by the edit; chat still off by d0, the others as they were
RELOAD = reload(
    [
        ClassInForce("chat", False, 2),
        ClassInForce("code-new", False, 2),
        ClassInForce("code-edit", True, 3),
        ClassInForce("rewrite", False, 4),
        ClassInForce("non-english", True, 4),
    ],
    ["rewrite", "code-edit"],
)


def prompt(name: str, k: int) -> PromptStarted:
    return prompt_started(prompt_id=f"{name}-9", prompt_class=name, draft_len=k, max_new_tokens=8)


def decision(name: str, on: bool, k_from: int, k_to: int, decision_id: int = 2) -> Decision:
    """The live rule's decision: the class's table verifies k_to of a whole draft (off: none)."""
    return gate_decision(name, k_from, k_to if on else 0, decision_id=decision_id)


def with_events(*extra) -> list:
    """The policy fixture with `extra` before its SessionFinished."""
    return POLICY_EVENTS[:-1] + list(extra) + POLICY_EVENTS[-1:]


def live_app():
    sub = Subscription(maxlen=10_000)
    return make_app(Feed(sub, "live")), sub


async def offered(app, pilot, sub, events) -> None:
    """Offer events to a live app and wait until it has applied and drawn them all."""
    target = app.state.events_seen + len(events)
    for event in events:
        sub.offer(event)
    await shown_until(pilot, lambda: app.state.events_seen >= target, f"{target} events applied")


def notice_text(app) -> str:
    """The notice box's lines as on screen, its border taken off, joined ("" while it is hidden)."""
    if not app.screen.query_one("#policy-notice").display:
        return ""
    return " ".join(line.strip("│╭╮╰╯─ ") for line in region_lines(app, "policy-notice"))


def squash(text: str) -> str:
    return "".join(text.split())


def class_cells(app, name: str) -> dict[str, str]:
    table = app.screen.query_one("#classes")
    return {str(key.value): str(cell).strip() for key, cell in zip(table.columns, table.get_row(name))}


# -- the classes pane shows the policy in force ------------------------------------------------------


async def test_a_reload_sets_each_classes_k_and_on_off_as_the_policy_in_force_runs_it():
    app, sub = live_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await offered(app, pilot, sub, POLICY_EVENTS[:-1])
        assert class_cells(app, "rewrite")["spec"] == "on" and class_cells(app, "code-edit")["k"] == "4"
        await offered(app, pilot, sub, [RELOAD])
        rewrite, code_edit, chat = (class_cells(app, n) for n in ("rewrite", "code-edit", "chat"))
        assert (rewrite["k"], rewrite["spec"]) == ("4", "off")  # off; its figures stay those at the k it ran at
        assert (code_edit["k"], code_edit["spec"]) == ("3", "on")
        assert chat["spec"] == "off d0"  # the edit left chat alone: the decision that switched it off stands
        await chat_in_view(app, pilot)
        shown = {line.split()[0].strip("│"): line for line in region_lines(app, "classes")[1:-1]}
        spec = {name: line.rstrip("│▁▂▃▄▅▆▇█ ").rsplit(" ", 1)[-1] for name, line in shown.items()}
        assert spec["rewrite"] == "off" and spec["code-edit"] == "on" and shown["code-edit"].split()[1] == "3"


async def test_decisions_and_prompts_after_a_reload_update_the_classes_as_before():
    app, sub = live_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await offered(app, pilot, sub, POLICY_EVENTS[:-1] + [RELOAD, prompt("rewrite", 4)])
        assert class_cells(app, "rewrite")["spec"] == "off"  # a probe's prompt at k=4 does not switch it on
        await offered(app, pilot, sub, [decision("rewrite", True, 4, 2), decision("code-edit", False, 3, 3, 3)])
        rewrite, code_edit = class_cells(app, "rewrite"), class_cells(app, "code-edit")
        assert (rewrite["k"], rewrite["spec"]) == ("4", "on")  # its prompts ask k=4; the gate cuts each draft
        assert code_edit["spec"] == "off d3"


def test_an_older_log_without_classes_folds_as_before():
    """classes == []: a reload lets the prompts say the k again, and leaves the decisions' offs alone."""
    state = ViewState()
    state.apply(with_events(reload([], []), prompt("code-new", 2))[:-1])
    assert state.draft_len_by_class["code-new"] == 2 and "code-new" not in state.off_by
    assert state.draft_len_by_class["chat"] == 0 and state.off_by["chat"].decision_id == 0
    assert state.draft_len_by_class["rewrite"] == 4


def test_the_policy_a_run_starts_with_sets_the_classes_and_a_refusal_changes_none():
    state = ViewState()
    state.apply([reload([ClassInForce("chat", False, 2), ClassInForce("rewrite", True, 5)], []), prompt("rewrite", 3)])
    assert state.draft_len_by_class == {"chat": 0, "rewrite": 5} and state.reloaded is None
    state.apply([refused()])
    assert state.draft_len_by_class == {"chat": 0, "rewrite": 5} and state.refused is not None


# -- a refused edit, then a reload taken ------------------------------------------------------------


async def test_a_refused_edits_whole_reason_is_on_an_80x24_screen_until_a_reload_is_taken(monkeypatch):
    monkeypatch.setattr(app_module, "RELOAD_NOTICE_S", 2.0)
    assert len(ERROR) == 150
    app, sub = live_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await offered(app, pilot, sub, POLICY_EVENTS[:-1] + [refused()])
        shown = notice_text(app)
        assert squash(ERROR) in squash(shown)  # the whole reason, across its wrapped lines
        assert squash("the previous policy stays in force") in squash(shown)
        screen = "\n".join(screen_lines(app))
        assert "policy edit refused" in screen
        assert app.screen.query_one("#decisions").border_subtitle == "edit refused"
        assert class_cells(app, "rewrite")["spec"] == "on"  # the previous policy stays in force

        await offered(app, pilot, sub, [RELOAD])
        screen = "\n".join(screen_lines(app))
        assert "refused" not in screen and "stays in force" not in screen
        assert "policy reloaded" in screen and squash(CHANGED_TEXT) in squash(notice_text(app))
        assert app.screen.query_one("#decisions").border_subtitle == "policy bbbbbbbb"
        # a taken reload is news only for a while
        await shown_until(pilot, lambda: notice_text(app) == "", "the reload's notice gone")
        assert "policy reloaded" not in "\n".join(screen_lines(app))


async def test_a_second_refusal_shows_its_own_reason_and_no_notice_without_an_edit():
    app, sub = live_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await offered(app, pilot, sub, POLICY_EVENTS[:-1])
        assert notice_text(app) == ""  # the policy the run started with is no news
        await offered(app, pilot, sub, [refused(), refused("policies/default.toml:3:1: expected '=' after a key")])
        shown = notice_text(app)
        assert "policies/default.toml:3:1: expected '=' after a key" in shown and squash(ERROR) not in squash(shown)


async def test_a_replay_jump_back_before_the_refusal_takes_its_notice_away(tmp_path):
    log = tmp_path / "refused.specmon"
    with LogWriter(log) as writer:
        for event in with_events(refused()):
            writer.write(event)
    feed = ReplayFeed(log, speed=0.0)
    app = make_app(feed)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot)
        assert squash(ERROR) in squash(notice_text(app))
        position = feed.position
        await pilot.press("g", "r", "1", "0", "enter")
        await shown_until(pilot, lambda: feed.position != position, "the jump back taken")
        assert app.state.rounds_seen == 11 and notice_text(app) == ""
        assert "refused" not in "\n".join(screen_lines(app))


def test_snapshot_policy_edit_refused_80x24(snap_compare):
    events = with_events(RELOAD, refused())

    async def run_before(pilot):
        await drawn(pilot.app, pilot, events)

    assert snap_compare(prefilled_events(events), terminal_size=(80, 24), run_before=run_before)


def test_a_class_a_reload_removed_reads_removed_not_on():
    state = ViewState()
    state.apply(POLICY_EVENTS[:-1])
    assert "chat" in state.classes
    state.apply(
        [
            reload(
                [
                    ClassInForce(c.name if c.name != "chat" else "talk", c.speculate, c.draft_len)
                    for c in RELOAD.classes
                ],
                ["talk", "chat"],
            )
        ]
    )
    from specmon.tui.rows import on_off

    assert on_off(state, "chat") == "removed" and not state.is_on("chat")
    assert on_off(state, "code-edit") == "on" and "talk" not in state.removed


async def test_a_class_an_edit_switched_off_before_it_drafted_says_off_everywhere():
    """rewrite, off by an edit before its first prompt, then decoded plainly: its titles, speed pane and
    foot say it is off (they said `rewrite`, `no round at k yet` and an older decision's k=4)."""
    from events import round_verified

    before = POLICY_EVENTS[:373]  # up to rewrite's first prompt
    plain = [prompt("rewrite", 0)] + [
        round_verified(round_id=10_000 + i, prompt_id="rewrite-9", prompt_class="rewrite", round_index=i)
        for i in range(3)
    ]
    events = before + [RELOAD] + plain
    app = prefilled(events)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, events)
        assert app.state.current_class == "rewrite" and not app.state.is_on("rewrite")
        assert region_lines(app, "acceptance")[0].startswith("╭─ acceptance · rewrite (off) ─")
        assert "the class is off" in region_lines(app, "acceptance")[2]  # not `no speculative round yet`
        assert "the class is off" in region_lines(app, "rejections")[1] and " off " in region_lines(app, "timing")[1]
        speed = region_lines(app, "speed")
        assert speed[1].startswith("│ speedup N/A: the class is off ") and "─ policy file: off ─╯" in speed[-1]
        assert class_cells(app, "rewrite")["spec"] == "off"


def test_the_speed_foot_cut_to_its_width_says_so():
    from decisions import gate_decision

    from specmon.tui.rows import policy_figure

    state = ViewState()
    state.apply([prompt("chat", 8), gate_decision("chat", 8, 6, decision_id=12)])
    whole = policy_figure(state, 80)
    assert whole.startswith("policy d12: k=6") and policy_figure(state, 12) == whole[:11] + "…"


def test_a_policy_session_before_its_first_prompt_says_no_class_is_off():
    """An idle server under a policy: nothing has run and nothing is off (it said `the class is off`)."""
    from specmon.tui.panes import render_speed

    state = ViewState()
    state.apply([e for e in POLICY_EVENTS[:5] if not isinstance(e, (PromptStarted, Decision))])
    assert state.policy_session and not state.current_class
    assert "the class is off" not in render_speed(state, 33).plain
