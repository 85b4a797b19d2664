"""`specmon bench policy` at 80 columns, from constructed bench logs: whole headers, intervals
never split across lines, a legend that wraps under itself from the left."""

import re
from pathlib import Path

from rich.console import Console

from specmon.cli.bench import bench_table, interval_line, overall_line
from specmon.events.schema import BENCH_FIXED_RULE
from specmon.sched.bench import bench_results, overall_figures
from events import prompt_started, round_verified

LOG = Path("logs/20261206-025454-22b7b6.specmon")
TITLE = "goodput, tokens/s: ngram, policy default.toml, 16 new tokens, 6 prompts (test half) x 1"
CLASSES = {"code-edit": 2.7, "rewrite": 3.0, "a-sixteen-char-c": 1.0}  # name: a 3-token round's speedup at k=8


def _decode(prompt_class: str, prompt: int, k: int | None, emitted: int, verify_ms: float) -> list:
    """One decode of a prompt, 8 rounds: the policy's (k None, drafting at 8) or a fixed k's."""
    run = {"session_id": "s", "t": 0.0, "prompt_id": f"{prompt_class}-{prompt}", "prompt_class": prompt_class}
    draft_len = 8 if k is None else k
    fixed = {} if k is None else {"class_rule": f"{BENCH_FIXED_RULE}{k}", "bench_k": k}
    started = prompt_started(**run, **fixed, draft_len=draft_len, max_new_tokens=16)
    shape = {"proposed": [1] * 8, "accepted": emitted - 1, "rejection_pos": emitted - 1} if draft_len else {}
    shape |= {"draft_len": draft_len, "emitted": [1] * emitted, "verify_ms": verify_ms}
    return [started, *(round_verified(**run, **shape) for _ in range(8))]


def _results(ks: list[int]) -> dict:
    """Four prompts a class, each decoded by the policy and at every fixed k; prompts differ, and the
    policy's time wobbles apart from the fixed runs', so each auto/best has an interval."""
    events = []
    for name, gain in CLASSES.items():
        for prompt in range(4):
            drafting_ms = 40.0 * 3 / gain
            events += _decode(name, prompt, None, 3, drafting_ms * (1 + (prompt % 2 - 0.5) / 20))
            for k in ks:
                events += _decode(name, prompt, k, 3 if k else 1, (drafting_ms if k else 40.0) * (1 + prompt / 25))
    return bench_results(events)


def hung(lines: list[str]) -> list[str]:
    """The words of a wrapped line: each continuation within 80 columns and hung two columns in."""
    assert all(len(line) <= 80 for line in lines) and all(
        line.startswith("  ") and not line.startswith("   ") for line in lines[1:]
    ), lines
    return " ".join(lines).split()


def _printed(*renderables) -> list[str]:
    console = Console(file=open("/dev/null", "w"), width=80, record=True)
    for r in renderables:
        console.print(r)
    return console.export_text().splitlines()


def test_the_bench_tables_keep_every_header_whole_in_80_columns():
    """Nine fixed k, a 16-character class: no header cut (once `best/pl…`, `auto/pla…`, `auto/be…`),
    no line past 80 columns, each figure in its column."""
    lines = _printed(bench_table(_results(list(range(9))), list(range(9)), TITLE, "class", LOG))
    assert [line for line in lines if len(line) > 80 or "…" in line] == []
    head = lines.index("class              k=0   k=1   k=2   k=3   k=4   k=5   k=6   k=7   k=8")
    assert hung(lines[:head]) == f"{TITLE}  (log: {LOG})".split()  # the title, wrapped under itself
    assert "class             best fixed  auto  best/plain  auto/plain  auto/best" in lines
    assert "code-edit           k=1 63.7  67.5       2.700       2.862      1.060" in lines
    assert "a-sixteen-char-c  23.6  23.6  23.6  23.6  23.6  23.6  23.6  23.6  23.6" in lines


def test_the_legend_wraps_under_itself_from_the_left():
    """The caption's last word (`held`) once sat alone, centred under the table."""
    lines = _printed(bench_table(_results([0, 8]), [0, 8], TITLE, "class", LOG))
    start = next(i for i, line in enumerate(lines) if line.startswith("goodput = emitted tokens / s"))
    said = hung(lines[start:])
    assert said[-3:] == ["other", "work", "held"] and len(lines) - start > 1


def test_an_interval_is_never_split_across_lines():
    """`rewrite [0.941, ` / `0.996]` and `auto/best single 1.000` / `[0.973, 1.028]` once."""
    results = _results([0, 8])
    for line in (interval_line(results), overall_line(overall_figures(results, [0, 8]), 6.8, 0.00496)):
        lines = _printed(line)
        said = " ".join(hung(lines))
        intervals = re.findall(r"\[\d\.\d+, \d\.\d+\]", said)
        assert len(lines) > 1 and len(intervals) >= 1, lines  # it wrapped, with intervals to keep whole
        assert all(any(interval in line for line in lines) for interval in intervals), lines
    assert "auto/best single 1.060 [1.035, 1.085]" in said and "policy work 6.8 ms = 0.496%" in said
