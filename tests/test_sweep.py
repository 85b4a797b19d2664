"""The sweep: plain cells equal plain decoding, tables recompute from the log, predictions and
break-even follow their formulas, and the suggested policy is valid and says why."""

import argparse
import itertools
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.console import Console

from specmon.cli import sweep as sweep_cli
from specmon.cli.sweep import cmd_sweep, parse_ks
from specmon.engine.draft_len import FixedDraftLen
from specmon.engine.drafters import NoDrafter
from specmon.engine.prompts import builtin_suite
from specmon.engine.rounds import RoundContext
from specmon.events.log import read_log
from specmon.events.schema import PromptFinished, PromptStarted, RoundVerified, Sampling
from specmon.metrics.predict import break_even_alpha, mix_tokens_per_round, tokens_per_round
from specmon.policy.schema import load_policy
from specmon.replay.sweep_report import cell_rows
from tinymodel import tiny_profile
from roundloop import decode_prompt
from events import round_verified

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    profile = tiny_profile(tmp)
    args = argparse.Namespace(
        profile=str(profile),
        prompts=None,
        classes="rewrite,code-edit",
        drafters="ngram,layerskip",
        layers=1,
        ks="0-3",
        temperatures="0,0.9",
        top_ps="1.0",
        seed=3,
        max_new_tokens=16,
        log=tmp / "sweep.specmon",
        out=tmp / "plots",
        suggest_policy=tmp / "suggested.toml",
    )
    printed = Console(file=open("/dev/null", "w"), width=250, record=True)
    quiet = Console(file=open("/dev/null", "w"), width=250)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sweep_cli, "out", printed)
        patch.setattr(sweep_cli, "err", quiet)
        assert cmd_sweep(args) == 0
    args.printed = printed.export_text()
    return args, profile


def test_plain_cells_equal_plain_decoding(sweep):
    from specmon.backends.loader import load_pair
    from specmon.backends.profiles import DrafterSpec, load_profile

    args, profile = sweep
    pair = load_pair(load_profile(str(profile)), DrafterSpec(kind="none"))
    plain_greedy = {
        e.prompt_id: e.generated
        for e in read_log(args.log)
        if isinstance(e, PromptFinished) and e.draft_len == 0 and e.sampling.greedy
    }
    prompts = builtin_suite(["rewrite", "code-edit"])
    assert set(plain_greedy) == {p.id for p in prompts}
    for prompt in prompts:
        ctx = RoundContext("t", prompt.id, prompt.prompt_class, itertools.count())
        run = decode_prompt(
            pair.target,
            NoDrafter(),
            pair.tokenizer.encode_chat(prompt.text),
            FixedDraftLen(0),
            Sampling(),
            16,
            ctx,
            lambda e: None,
        )
        assert run.generated == plain_greedy[prompt.id]


def test_every_cell_is_there_and_recomputes_from_the_log(sweep):
    args, _ = sweep
    rows = cell_rows(read_log(args.log))
    keys = {(r.key.prompt_class, r.key.drafter, r.key.sampling.temperature, r.key.draft_len) for r in rows}
    for cls in ("rewrite", "code-edit"):
        for temp in (0.0, 0.9):
            assert (cls, "none", temp, 0) in keys
            for drafter in ("ngram", "layerskip-1"):
                assert {(cls, drafter, temp, k) for k in (1, 2, 3)} <= keys
    by_cell = _raw_cells(args.log)
    for r in rows:
        if r.key.draft_len:
            assert r.predicted == pytest.approx(_predicted_by_hand(by_cell, r.key), rel=1e-9)
            shares = [n / r.run.rounds for n in r.run.proposed_gt]  # the token term is the measured one
            assert mix_tokens_per_round(shares, r.run.per_position) == pytest.approx(1 + r.run.mean_accepted_len)
        if r.key.draft_len and r.key.sampling.greedy:
            assert set(r.run.verdicts) <= {"identical", "near-tie"}  # greedy cells equal plain decoding
        if not r.key.sampling.greedy and r.key.draft_len:
            assert set(r.run.verdicts) == {"sampled"}


def _raw_cells(log) -> dict:
    """Rounds per (class, drafter, temperature, k), grouped straight from the raw events."""
    cells, opened = {}, None
    for ev in read_log(log):
        if isinstance(ev, PromptStarted):
            opened = ev
        elif isinstance(ev, RoundVerified):
            drafter = opened.drafter if ev.draft_len else "none"
            cells.setdefault((ev.prompt_class, drafter, ev.sampling.temperature, ev.draft_len), []).append(ev)
    return cells


def _predicted_by_hand(cells: dict, key) -> float:
    """The measured-mix prediction written out from raw rounds, not through metrics.predict:
    tokens per round = 1 + Σ_i P(L > i)·a_i; round ms = draft + overhead + Σ_l P(L = l)·v(l)·step,
    v(l) = verify ms at l proposed / verify ms at 0 proposed, over every round of the sweep."""
    rounds = cells[(key.prompt_class, key.drafter, key.sampling.temperature, key.draft_len)]
    plain = cells[(key.prompt_class, "none", key.sampling.temperature, 0)]
    everything = [e for group in cells.values() for e in group]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    v = {
        n: mean([e.verify_ms for e in everything if len(e.proposed) == n])
        for n in {len(e.proposed) for e in everything}
    }
    step = mean([e.verify_ms for e in plain])
    tokens = 1.0
    for i in range(key.draft_len):
        reached = [e for e in rounds if len(e.proposed) > i]
        if reached:  # P(L > i) · a_i, a_i = rounds accepted > i / rounds proposed > i
            tokens += len(reached) / len(rounds) * sum(e.accepted > i for e in reached) / len(reached)
    round_ms = mean([e.draft_ms + e.overhead_ms + v[len(e.proposed)] / v[0] * step for e in rounds])
    plain_goodput = sum(len(e.emitted) for e in plain) / sum(e.draft_ms + e.verify_ms + e.overhead_ms for e in plain)
    return tokens / round_ms / plain_goodput


def tables_at(log, width: int) -> str:
    """The sweep's two tables, recomputed from its log, as a console of `width` prints them."""
    from specmon.replay.sweep_tables import break_even_table, results_table

    console = Console(file=open("/dev/null", "w"), width=width, record=True)
    rows = cell_rows(read_log(log))
    console.print(results_table(rows, log.name))
    console.print(break_even_table(rows))
    return console.export_text()


def test_the_printed_table_is_the_one_the_log_recomputes(sweep):
    args, _ = sweep
    assert tables_at(args.log, 250) in args.printed


def test_suggested_policy_is_valid_and_names_the_sweep(sweep):
    args, _ = sweep
    policy = load_policy(args.suggest_policy)
    text = args.suggest_policy.read_text()
    for name in ("rewrite", "code-edit"):
        cls = policy.class_named(name)
        assert cls.speculate in ("on", "off")
        assert f"# sweep {args.log.name}:" in text.split(f'name = "{name}"')[1].split("[[classes]]")[0]
    assert "# Classes are tried in order" in text  # the default policy's comments survive


def test_prediction_formulas():
    assert tokens_per_round(0.0, 4) == 1.0 and tokens_per_round(1.0, 4) == 5.0
    assert tokens_per_round(0.5, 2) == pytest.approx(1.75)
    alpha = break_even_alpha(4, 0.05, 1.6)
    assert tokens_per_round(alpha, 4) / (4 * 0.05 + 1.6) == pytest.approx(1.0, abs=1e-9)  # the predicted speedup: 1
    assert break_even_alpha(2, 2.0, 1.5) is None  # 3 tokens at best, 5.5 steps of cost: never pays


def test_ks_parsing():
    assert parse_ks("0-8") == list(range(9)) and parse_ks("2,4") == [0, 2, 4]
    with pytest.raises(Exception, match="expected a range"):
        parse_ks("four")
    with pytest.raises(Exception, match="a range goes low to high, like 2-8"):
        parse_ks("8-2")


def test_cells_with_few_rounds_or_far_from_their_prediction_are_flagged():
    from specmon.metrics.stats import CellKey, RunStats
    from specmon.replay.sweep_report import CellRow

    run = RunStats(4, rounds=49)
    row = CellRow(CellKey("rewrite", "ngram", Sampling(), 4), run, 1.0, 0.1, 1.2, 1.3, None)
    assert row.flag == "< 50 rounds"
    run.rounds = 50
    assert row.flag == "off by -23%"  # 1.0 measured / 1.3 predicted - 1
    row.predicted = 1.1
    assert row.flag == ""  # -9%: within 15%
    assert CellRow(CellKey("rewrite", "none", Sampling(), 0), run, 1.0, None, 1.0, 1.0, None).flag == ""


def test_break_even_is_priced_on_the_rounds_that_drafted(sweep):
    """Eq. 1 has every round propose k: its draft and verify costs are the drafting rounds' own,
    not averaged with rounds that proposed nothing (a chat cell once read 0.21 against 0.33 measured
    while running 0.84x plain), against a plain step, both over the rounds the host left alone."""
    from specmon.metrics.contention import disturbed

    args, _ = sweep
    rows = cell_rows(read_log(args.log))
    raw = _raw_cells(args.log)
    checked = 0
    for r in rows:
        if not r.key.draft_len or not r.key.sampling.greedy:
            continue
        rounds = raw[(r.key.prompt_class, r.key.drafter, 0.0, r.key.draft_len)]
        drafted = [e for e in rounds if e.proposed and not disturbed(e)]
        plain = [e for e in raw[(r.key.prompt_class, "none", 0.0, 0)] if not disturbed(e)]
        assert r.run.drafted_rounds == sum(bool(e.proposed) for e in rounds)
        if not drafted or not plain:
            assert r.break_even is None
            continue
        step = sum(e.verify_ms for e in plain) / len(plain)
        c = sum(e.draft_ms for e in drafted) / len(drafted) / r.key.draft_len / step
        v = sum(e.verify_ms for e in drafted) / len(drafted) / step
        assert (r.c, r.v) == (pytest.approx(c), pytest.approx(v))
        assert r.break_even == (
            None
            if break_even_alpha(r.key.draft_len, c, v) is None
            else pytest.approx(break_even_alpha(r.key.draft_len, c, v))
        )
        checked += 1
    assert checked
    assert "break-even acceptance per k, on the rounds that drafted" in args.printed


def test_goodput_plot_shows_measured_k_with_intervals_from_zero_and_names_plain():
    from specmon.metrics.stats import CellKey, RunStats
    from specmon.replay.sweep_report import CellRow, goodput_figure, predicted_figure

    def cell(drafter, k, tok_ms, sampling=Sampling()):
        run = RunStats(k)
        for i, prompt in enumerate(("a", "b", "c")):  # three prompts: an interval to draw
            run.add_round(
                round_verified(
                    round_id=i,
                    prompt_id=prompt,
                    draft_len=k,
                    proposed=[1] * k,
                    accepted=k,
                    emitted=[1] * (k + 1),
                    verify_ms=(k + 1) / tok_ms * (1 + i / 10),
                    sampling=sampling,
                )
            )
        return CellRow(CellKey("chat", drafter, sampling, k), run, 1.1, None, None, 1.2 if k else None, None)

    rows = [cell("none", 0, 2.1), cell("ngram", 4, 3.0), cell("ngram", 6, 3.1), cell("ngram", 7, 3.15)]
    ax = goodput_figure(rows).axes[0]
    assert ax.get_ylim()[0] == 0.0  # from zero: 2.1 against 3.15 is not a 50% gap
    assert list(ax.get_xticks()) == [0, 4, 6, 7]  # only the k measured
    labels = ax.get_legend_handles_labels()[1]
    assert labels == ["chat · plain (k=0) · greedy", "chat · ngram · greedy"]
    joined = [list(line.get_xdata()) for line in ax.get_lines() if len(line.get_xdata()) == 2]
    assert joined == [[6, 7]]  # no line across k = 1..3 or 5, which were never run
    assert len(ax.collections) == 2 and all(len(c.get_segments()) for c in ax.collections)  # the intervals
    predicted = predicted_figure(rows).axes[0]
    assert predicted.get_legend() is not None and predicted.get_xlim()[0] == predicted.get_ylim()[0] == 0.0
    assert "chat · ngram" in predicted.get_legend_handles_labels()[1]


def test_piped_progress_prints_lines_as_the_runs_finish(monkeypatch):
    from specmon import console

    printed = Console(file=open("/dev/null", "w"), width=80, record=True)
    monkeypatch.setattr(console, "err", printed)
    now = [0.0]
    done = console.progress_lines("sweep 3 cells", 40, clock=lambda: now[0])
    for n in range(1, 41):
        now[0] += 1.0
        done(n)
        if n == 2:
            now[0] += console.PROGRESS_LINE_S  # a slow run: a line before the next tenth
    lines = printed.export_text().splitlines()
    assert lines[0] == "sweep 3 cells: 0 of 40 done"
    assert lines[1:4] == [  # the time left at the pace so far: 33 s for 3, so 37 more take 407 s
        "sweep 3 cells: 3 of 40 done (33 s, about 7 min left)",
        "sweep 3 cells: 4 of 40 done (34 s, about 5 min left)",
        "sweep 3 cells: 8 of 40 done (38 s, about 3 min left)",
    ]
    assert lines[4] == "sweep 3 cells: 12 of 40 done (42 s, about 98 s left)"
    assert lines[-1] == "sweep 3 cells: 40 of 40 done (70 s)" and len(lines) == 12


def test_log_info_names_the_drafters_a_sweep_ran_with(sweep, capsys):
    from specmon.cli.main import main
    from specmon.tui.state import ViewState

    args, _ = sweep
    assert main(["log", "info", str(args.log)]) == 0
    header = capsys.readouterr().out.splitlines()[1]
    assert " drafter ngram, layerskip-1 (per prompt) " in header and "drafter none" not in header
    state = ViewState()
    state.apply(list(read_log(args.log)))
    assert state.session.drafter == "none" and state.drafter_label() == "ngram,layerskip-1"


def test_sweep_tables_fit_80_columns(sweep):
    args, _ = sweep
    lines = tables_at(args.log, 80).splitlines()
    assert [line for line in lines if cell_len(line) > 80] == []  # columns on screen: α̂ is one
    assert any(line.split()[:3] == ["rewrite", "ngram", "1"] for line in lines)  # the break-even rows, whole


def test_the_progress_line_counts_cells_per_class_and_says_it_counts_decodes(monkeypatch):
    from specmon import console
    from specmon.cli.sweep import progress_title
    from specmon.sched.sweep import grid

    printed = Console(file=open("/dev/null", "w"), width=80, record=True)
    monkeypatch.setattr(console, "err", printed)
    prompts = builtin_suite(["chat", "rewrite"])
    cells = grid(["ngram"], parse_ks("0,2,4"), [Sampling(0.0, 1.0, 0, 0)])  # 3 cells a class: k 0, 2, 4
    console.progress_lines(progress_title(cells, prompts), len(cells) * len(prompts))
    assert printed.export_text().splitlines() == [f"sweep 6 cells, decodes: 0 of {3 * len(prompts)} done"]
