"""Figures that read right (issue 37's display defects): each names its round set in words a
reader takes at face value, and two places never show two definitions of one thing. Expected
figures are computed here from the events, never read back from what is shown."""

from __future__ import annotations


from specmon.cli.main import main
from specmon.events.log import read_log
from specmon.events.schema import Decision, RoundVerified
from specmon.metrics.stats import class_stats
from specmon.tui.panes import render_speed, rounds_caption, run_title
from specmon.tui.rows import status_line
from specmon.tui.state import ViewState
from tables_text import printed_rows
from test_tui_numbers import LAST_CHAT
from test_tui_view import FIXTURES, POLICY_EVENTS, POLICY_LOG, drawn, prefilled, region_lines

SERVE_EVENTS = list(read_log(FIXTURES / "session-serve.specmon"))
PROMPT_OFF_LOG = FIXTURES / "session-prompt-off.specmon"


def prompts_with_rounds(events, name: str, k: int) -> int:
    return len(
        {e.prompt_id for e in events if isinstance(e, RoundVerified) and e.prompt_class == name and e.draft_len == k}
    )


def test_log_info_counts_the_prompts_that_ran_with_speculation(capsys):
    """code-edit and chat ran at k > 0 with no plain round: the column once read 0 for both."""
    assert main(["log", "info", str(FIXTURES / "session-serve.specmon")]) == 0
    rows = printed_rows(capsys.readouterr().out)
    for name, k in (("code-edit", 7), ("chat", 2), ("rewrite", 7)):
        assert rows[(name, str(k))]["prompts"] == str(prompts_with_rounds(SERVE_EVENTS, name, k)) != "0", name
    assert rows[("rewrite", "0")]["prompts"] == str(prompts_with_rounds(SERVE_EVENTS, "rewrite", 0))  # plain


def last_prompt_of(events, name: str) -> int:
    return max(i for i, e in enumerate(events) if isinstance(e, RoundVerified) and e.prompt_class == name)


def test_speed_pane_says_why_there_is_no_speedup_and_counts_the_prompts_at_k():
    state = ViewState()
    state.apply(SERVE_EVENTS[: last_prompt_of(SERVE_EVENTS, "code-edit") + 1])
    assert state.current_class == "code-edit" and class_stats(SERVE_EVENTS)["code-edit"].baseline is None
    lines = render_speed(state, 32).plain.splitlines()
    # its plain side is k = 0 rounds: a policy that keeps the class on runs none, so none is coming
    assert state.policy_session and lines[0] == "speedup N/A: policy ran no plain"
    assert lines[1].split() == ["goodput", "tok/s", "rounds", "prompts"]
    run = class_stats(SERVE_EVENTS)["code-edit"].runs[7]
    assert lines[2].split() == [
        "spec",
        f"{run.tok_per_s:.1f}",
        str(run.rounds),
        str(prompts_with_rounds(SERVE_EVENTS, "code-edit", 7)),
    ]
    assert lines[3].split() == ["plain", "N/A"]


def test_one_round_is_one_round():
    first = next(i for i, e in enumerate(POLICY_EVENTS) if isinstance(e, RoundVerified) and e.draft_len)
    state = ViewState()
    state.apply(POLICY_EVENTS[: first + 1])
    assert rounds_caption(state) == "1 round"
    assert status_line(state, "fixture", []).plain.endswith(f" · {state.rounds_seen} rounds")
    one = ViewState()
    one.apply([e for e in POLICY_EVENTS[: first + 1] if not isinstance(e, RoundVerified)] + [POLICY_EVENTS[first]])
    assert status_line(one, "fixture", []).plain.endswith(" · 1 round")


def test_policy_explain_refuses_a_retired_rules_log_in_one_line_and_the_log_still_replays(capsys):
    assert main(["policy", "explain", str(POLICY_LOG)]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "made by a rule specmon has retired" in captured.err
    state = ViewState()
    state.apply(POLICY_EVENTS)  # its decisions still switch its classes in the view, without their figures
    off = [d for d in POLICY_EVENTS if isinstance(d, Decision) and d.applied and not d.speculate_to]
    assert off and all(not state.is_on(d.prompt_class) for d in off)


def test_policy_explain_says_what_each_decision_changed():
    from decisions import gate_decision

    from specmon.policy.explain import what_changed

    assert what_changed(gate_decision("chat", 2, 0)).startswith("speculation on->off, k 2->0, verified of a whole")
    cut = gate_decision("chat", 8, 8, match_from=2, match_to=3)
    assert what_changed(cut) == "drafts from a match of 2->3, only where the drafter proposed fewer than k tokens"


def test_a_switched_off_class_names_its_k_whole_in_the_narrow_ms_title():
    state = ViewState()
    state.apply(POLICY_EVENTS[: LAST_CHAT + 1])
    assert (state.current_class, state.class_k, state.is_on("chat")) == ("chat", 2, False)
    assert run_title(state, "ms", 40) == "ms · chat k=2 (off)"
    assert run_title(state, "ms", 13) == "ms k=2 (off)"  # was cut to `ms · k=2 (o…`


async def test_the_ms_pane_title_is_whole_at_80_columns():
    events = POLICY_EVENTS[: LAST_CHAT + 1]
    app = prefilled(events)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, events)
        top = region_lines(app, "timing")[0]
        assert "ms k=2 (off)" in top and "…" not in top, top
        assert region_lines(app, "timing")[3].split()[1] == "overhead"  # the report's word, not `other`
