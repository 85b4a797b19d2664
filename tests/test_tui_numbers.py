"""Numbers you can trust, as the TUI shows them: one round set per figure, named in the pane;
the speedup with its interval, sample sizes and verdict; empty rounds apart; switched-off
classes keep their evidence. Every expected figure is computed here from the events or from
specmon.metrics, never read back from the TUI's own state."""

from __future__ import annotations

from specmon.events.schema import Decision, PromptFinished, RoundVerified, Sampling
from specmon.metrics.rates import acceptance_rate
from specmon.metrics.stats import class_stats
from specmon.tui.panes import bar_line, render_acceptance, render_speed
from specmon.tui.state import ViewState
from test_tui_view import POLICY_EVENTS, TUI_EVENTS, chat_in_view, prefilled, region_lines
from waiting import drawn
from events import prompt_started, round_verified, session_started

LAST_CHAT = max(i for i, e in enumerate(POLICY_EVENTS) if isinstance(e, PromptFinished) and e.prompt_class == "chat")


def rounds_of(events, name: str, k: int) -> list[RoundVerified]:
    return [e for e in events if isinstance(e, RoundVerified) and e.prompt_class == name and e.draft_len == k]


def pane(app, pane_id: str) -> list[str]:
    return str(app.screen.query_one(f"#{pane_id}").render()).splitlines()


def spans_style(text, fragment: str) -> str:
    """The style of the span that starts the fragment."""
    start = text.plain.index(fragment)
    return " ".join(str(span.style) for span in text.spans if span.start <= start < span.end)


async def test_acceptance_headline_and_sparkline_cover_one_class_at_one_k():
    app = prefilled(POLICY_EVENTS)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, POLICY_EVENTS)
        run = class_stats(POLICY_EVENTS)["non-english"].runs[4]  # the last prompt's class, at its k
        rounds = rounds_of(POLICY_EVENTS, "non-english", 4)
        assert app.screen.query_one("#acceptance").border_title == "acceptance · non-english k=4"
        lines = pane(app, "acceptance")
        assert lines[0].startswith(f"acceptance rate {run.acceptance_rate:.2f} (Σacc/Σprop)")
        assert lines[1] == f"{run.rounds} rounds: {run.rounds - run.empty_rounds} proposed, {run.empty_rounds} empty"
        assert run.rounds == len(rounds) == 16 and run.empty_rounds == 9
        per_round = [acceptance_rate(e.accepted, len(e.proposed)) for e in rounds]  # None: proposed nothing
        assert lines[2] == bar_line(per_round, 38, 1.0)
        assert lines[2].count("·") == run.empty_rounds
        await pilot.press("m")
        lines = pane(app, "acceptance")
        assert lines[0].startswith(f"mean accepted length {run.mean_accepted_len:.2f} (Σacc/rounds)")
        assert lines[1].startswith(f"{run.rounds} rounds")


def test_sparkline_window_is_the_same_class_and_k_whatever_ran_last():
    """While chat is decoded plainly, its panes still show chat at k=2, never another class's rounds."""
    state = ViewState()
    state.apply(POLICY_EVENTS[: LAST_CHAT + 1])
    assert (state.current_class, state.class_k) == ("chat", 2)
    chat = rounds_of(POLICY_EVENTS, "chat", 2)
    text = render_acceptance(state, "acceptance rate", 200).plain.splitlines()
    assert text[2] == bar_line([acceptance_rate(e.accepted, len(e.proposed)) for e in chat], 200, 1.0)
    assert text[1] == "62 rounds: 2 proposed, 60 proposed nothing"


async def test_speed_pane_shows_the_estimate_with_interval_and_sample_sizes():
    app = prefilled(TUI_EVENTS)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, TUI_EVENTS)
        stats = class_stats(TUI_EVENTS)["rewrite"]
        estimate = stats.speedup_estimate(3)
        assert estimate.verdict == "faster" and estimate.low > 1.0
        lines = pane(app, "speed")
        assert lines[0] == f"{estimate.ratio:.2f}× [{estimate.low:.2f}–{estimate.high:.2f}] faster"
        spec, plain = stats.runs[3], stats.baseline  # at 80×24 the pane has 3 rows: both sides in two lines
        assert lines[1] == f"spec {spec.tok_per_s:.1f} · plain {plain.tok_per_s:.1f} tok/s"
        assert (
            lines[2]
            == f"rounds {spec.rounds}/{plain.rounds} · prompts {estimate.prompts_spec}/{estimate.prompts_plain}"
        )
        assert len(lines) == 3
        assert app.screen.query_one("#speed").border_title == "speed · rewrite k=3"


def test_speed_pane_says_not_yet_known_while_the_interval_holds_one():
    state = ViewState()
    state.apply(POLICY_EVENTS[: LAST_CHAT + 1])
    estimate = class_stats(POLICY_EVENTS[: LAST_CHAT + 1])["chat"].speedup_estimate(2)
    assert estimate.low < 1.0 < estimate.high
    text = render_speed(state)
    first = text.plain.splitlines()[0]
    assert first == f"{estimate.ratio:.2f}× [{estimate.low:.2f}–{estimate.high:.2f}] not yet known"
    assert "green" not in spans_style(text, f"{estimate.ratio:.2f}×")


def test_speed_pane_says_not_yet_known_with_one_prompt():
    state = ViewState()
    state.apply(POLICY_EVENTS)
    estimate = class_stats(POLICY_EVENTS)["non-english"].speedup_estimate(4)
    assert estimate.prompts_spec == 1 and estimate.ratio > 1.0
    text = render_speed(state)
    assert text.plain.splitlines()[0] == f"{estimate.ratio:.2f}× not yet known (1 prompt)"
    assert "green" not in spans_style(text, f"{estimate.ratio:.2f}×")


def noisy_session() -> list:
    """Speculative rounds that emit more than accepted + 1 tokens: a ratio its counts cannot give."""
    sampling = Sampling()
    events = [session_started(session_id="20260101-000000-n0153e")]
    round_id = 0
    for prompt in range(2):
        for k in (0, 2):
            events.append(
                prompt_started(
                    prompt_id=f"x-{prompt}", prompt_class="x", draft_len=k, sampling=sampling, max_new_tokens=9
                )
            )
            for i in range(4):
                events.append(
                    round_verified(
                        round_id=round_id,
                        prompt_id=f"x-{prompt}",
                        prompt_class="x",
                        round_index=i,
                        draft_len=k,
                        proposed=[1, 2] if k else [],
                        rejection_pos=0 if k else None,
                        emitted=[7] * (3 if k else 1),
                        verify_ms=10.0 + prompt,
                        sampling=sampling,
                    )
                )
                round_id += 1
    return events


def test_speed_pane_calls_a_ratio_above_the_sanity_bound_noise():
    events = noisy_session()
    estimate = class_stats(events)["x"].speedup_estimate(2)
    assert estimate.verdict == "noise"
    state = ViewState()
    state.apply(events)
    text = render_speed(state)
    assert text.plain.splitlines()[0].startswith(f"{estimate.ratio:.2f}×")
    assert f"noise > {estimate.bound:.2f}×" in text.plain
    assert "green" not in spans_style(text, f"{estimate.ratio:.2f}×")


async def test_class_table_rows_are_the_metrics_at_each_class_k_with_empty_rounds_apart():
    app = prefilled(POLICY_EVENTS)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, POLICY_EVENTS)
        stats = class_stats(POLICY_EVENTS)
        table = app.screen.query_one("#classes")
        rows = {str(table.get_row_at(i)[0]): [str(c) for c in table.get_row_at(i)] for i in range(table.row_count)}
        marks = {"faster": "", "slower": "", "not yet known": "?", "noise": "!"}
        for name, k in (("chat", 2), ("code-new", 2), ("code-edit", 4), ("rewrite", 4), ("non-english", 4)):
            run, estimate = stats[name].runs[k], stats[name].speedup_estimate(k)
            assert rows[name][1:7] == [
                str(k),
                str(run.rounds),
                str(run.empty_rounds),
                f"{run.acceptance_rate:.2f}",
                f"{run.mean_accepted_len:.2f}",
                f"{estimate.ratio:.2f}×" + marks[estimate.verdict],
            ], name
        assert rows["code-edit"][7].strip() == rows["rewrite"][7].strip() == "on"


async def test_a_switched_off_class_keeps_its_figures_and_the_decision_that_switched_it_off():
    app = prefilled(POLICY_EVENTS)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, POLICY_EVENTS)
        await chat_in_view(app, pilot)
        decisions = {d.prompt_class: d for d in POLICY_EVENTS if isinstance(d, Decision)}
        run = class_stats(POLICY_EVENTS)["chat"].runs[2]
        chat = next(line for line in region_lines(app, "classes") if line.startswith("│chat"))
        d = decisions["chat"]
        assert not d.speculate_to and d.k_from == 2
        assert chat.split()[1:5] == ["2", str(run.rounds), str(run.empty_rounds), f"{run.acceptance_rate:.2f}"]
        assert f"off d{d.decision_id}" in chat
        assert "N/A" not in chat


async def test_memory_pane_shows_the_rounds_memory_when_no_sample_came():
    app = prefilled(POLICY_EVENTS)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, POLICY_EVENTS)
        last = [e for e in POLICY_EVENTS if isinstance(e, RoundVerified)][-1]
        assert f"RSS  {last.mem_bytes / 2**30:.2f} GiB" in "\n".join(pane(app, "memory"))


async def test_the_speed_pane_shows_what_the_policy_last_decided_for_the_class():
    from decisions import gate_decision

    last = next(e for e in reversed(POLICY_EVENTS) if isinstance(e, RoundVerified))
    older = gate_decision(last.prompt_class, 8, 4, decision_id=8, t=last.t)
    decided = gate_decision(last.prompt_class, 4, 2, decision_id=9, t=last.t, match_from=2, match_to=3)
    events = POLICY_EVENTS[:-1] + [older, decided, POLICY_EVENTS[-1]]
    app = prefilled(events)
    async with app.run_test(size=(80, 24)) as pilot:
        await drawn(app, pilot, events)
        speed = app.screen.query_one("#speed")
        assert str(speed.border_subtitle) == "policy d9: k=2, match ≥3"  # the newest, whole at 80 columns
