"""Every line the commands print fits 80 columns when COLUMNS=80 asks for them, piped as a
script or `tee` reads them: `log info` on every fixture, `policy explain`, `attach --headless`
(its round and decision lines too), `replay --headless`, `report`, `policy check`, and the lines
`run` and `serve` print as they start, whatever the terminal's width."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from rich.cells import cell_len

from specmon.data import shipped
from tinymodel import tiny_profile
from waiting import wait_until

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
LOGS = sorted(FIXTURES.glob("*.specmon"))
WIDTH = 80


def at_80(*args: str, columns: int = WIDTH, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": str(columns), **env}
    return subprocess.run(
        [sys.executable, "-m", "specmon.cli", *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=300
    )


def wide_lines(done: subprocess.CompletedProcess) -> list[str]:
    lines = (done.stdout + done.stderr).splitlines()
    assert lines, "the command printed nothing"
    return [f"{cell_len(line)}: {line}" for line in lines if cell_len(line) > WIDTH]  # columns a terminal shows


@pytest.mark.parametrize("log", LOGS, ids=[p.name for p in LOGS])
def test_log_info_fits_80_columns(log):
    assert wide_lines(at_80("log", "info", str(log))) == []


def test_log_infos_legend_wraps_at_words():
    done = at_80("log", "info", str(FIXTURES / "session-policy.specmon"))
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("prompts: decoded at that k"))
    legend = lines[start:]
    words = " ".join(line.strip() for line in legend).split()
    assert "speedup" in words and "per-position" in words and "acceptance" in words  # no word split over lines
    assert all(cell_len(line) <= WIDTH for line in legend) and len(legend) > 1


def test_policy_explain_fits_80_columns(live_session):
    done = at_80("policy", "explain", str(live_session.log_path))
    assert done.returncode == 0 and " reproduce from what they cite" in done.stdout, done.stdout + done.stderr
    assert wide_lines(done) == []


def test_attach_headless_round_lines_fit_80_columns_whole():
    """A round is one line (91 columns once); a wrapped one would be two lines to a reader."""
    done = at_80("attach", "--headless", str(FIXTURES / "session-policy.specmon"))
    assert done.returncode == 0, done.stderr
    assert wide_lines(done) == []
    rounds = [line for line in done.stdout.splitlines() if line.startswith("  round ")]
    assert len(rounds) == 523 and all(line.endswith(" ms") for line in rounds)


def test_replay_headless_report_and_policy_check_fit_80_columns(tmp_path):
    assert wide_lines(at_80("replay", "--headless", str(FIXTURES / "session-serve.specmon"))) == []
    assert wide_lines(at_80("report", str(FIXTURES / "session-tui.specmon"), "--out", str(tmp_path / "r"))) == []
    assert wide_lines(at_80("policy", "check", str(REPO / "policies" / "default.toml"))) == []


@pytest.fixture
def short_dir():
    """A folder as short as /run/user/1000 (pytest's own are 70 columns deep, longer than any path
    a line can hold beside a command): the runtime folder, the log's and the model's."""
    folder = Path(tempfile.mkdtemp(dir="/tmp"))
    yield folder
    shutil.rmtree(folder)


def run_under_the_policy(folder: Path, *flags: str, columns: int = WIDTH) -> tuple[subprocess.CompletedProcess, Path]:
    """`run --headless` of one prompt under the shipped policy, the log (returned) in FOLDER/logs,
    FOLDER the runtime folder too."""
    (folder / "logs").mkdir()
    log = folder / "logs" / "20261206-022954-8be60d.specmon"
    prompts = folder / "p.jsonl"
    prompts.write_text('{"id": "p1", "prompt": "Say hello.", "class": "chat"}\n')
    profile = str(tiny_profile(folder, max_new_tokens=8))
    args = ("run", "--headless", "--profile", profile, "--prompts", str(prompts), "--policy", "default")
    done = at_80(*args, "--log", str(log), *flags, columns=columns, XDG_RUNTIME_DIR=str(folder))
    return done, log


def test_runs_start_lines_fit_80_columns_with_each_command_whole(short_dir):
    """With a policy and --listen, each line `run` prints as it starts (once up to 190 columns)
    fits 80, on a 200-column terminal too, and each command to copy is whole on its line."""
    done, log = run_under_the_policy(short_dir, "--listen", "127.0.0.1:0", columns=200)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()  # stdout's table is as wide as COLUMNS asks
    under_table = [line for line in lines if line.startswith("host ")]  # a busy host's warning: the table's width
    assert [line for line in lines if cell_len(line) > WIDTH and line not in under_table] == []
    sock = re.search(r"\S+\.sock", done.stderr).group(0)
    port = re.search(r"serving on 127\.0\.0\.1:(\d+)", done.stderr).group(1)
    token = f"--token-file {sock.removesuffix('.sock')}.token"
    assert any(f"specmon attach {sock}" in line for line in lines)  # a command to copy, whole on one line
    assert any(token in line for line in lines)
    assert unwrapped(lines)[:2] == [  # every word kept, in order
        f"specmon: logging to {log}; watch with: specmon attach {sock}",
        f"specmon: serving on 127.0.0.1:{port}; attach with: specmon attach 127.0.0.1:{port} {token} "
        "(from another machine: copy that file, or set SPECMON_TOKEN)",
    ]
    assert unwrapped(lines)[2].startswith("timing the engine for the policy: 0 of ")  # its progress, a line a tenth


def unwrapped(lines: list[str]) -> list[str]:
    """Lines as they were before wrapping: each continuation (indented) joined to the line it continues."""
    joined: list[str] = []
    for line in lines:
        if line.startswith("  ") and joined:
            joined[-1] += " " + line.strip()
        else:
            joined.append(line)
    return joined


def test_serves_start_line_fits_80_columns_with_the_address_first(short_dir):
    """The serving line (once 94 columns here, its address last) wraps under a hanging indent,
    the address on its first line, on a 200-column terminal too."""
    profile = tiny_profile(short_dir)
    errors = short_dir / "stderr"
    env = {**os.environ, "COLUMNS": "200", "XDG_RUNTIME_DIR": str(short_dir)}
    with open(errors, "w") as stderr:
        server = subprocess.Popen(
            [sys.executable, "-m", "specmon.cli", "serve", "--headless", "-k", "2", "--port", "0"]
            + ["--profile", str(profile), "--log", str(short_dir / "serve.specmon")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            cwd=REPO,
            env=env,
        )
    try:
        said = wait_until(lambda: "fixed k=2)" in errors.read_text() and errors.read_text(), "serve's start line", 240)
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(60)
    lines = said.splitlines()
    assert [line for line in lines if cell_len(line) > WIDTH] == []
    port = re.search(r"http://127\.0\.0\.1:(\d+)/v1", said).group(1)
    (first,) = [line for line in lines if line.startswith("specmon: serving on ")]
    assert first.startswith(f"specmon: serving on http://127.0.0.1:{port}/v1: ")  # what a client needs, first
    assert lines[-1].startswith("  ")
    assert (
        unwrapped(lines)[-1]
        == f"specmon: serving on http://127.0.0.1:{port}/v1: {profile.parent}/tiny.gguf (ngram, fixed k=2)"
    )


def assert_hung(lines: list[str], at: int, under: int, said: str) -> None:
    """lines[at] and the lines that go on under column `under` after it: wrapped (more than one), each within
    the width, and together saying `said` word for word (where the breaks fall is free)."""
    block = [lines[at]]
    for line in lines[at + 1 :]:
        if len(line) - len(line.lstrip()) != under:
            break
        block.append(line)
    assert len(block) > 1 and all(len(line) <= WIDTH for line in block), block
    assert " ".join(block).split()[: len(said.split())] == said.split(), block


def test_log_infos_wrapped_header_lines_keep_their_indent():
    """At 80 columns the target, host and verify-cost lines wrap (a llama.cpp session's); each
    continuation hangs under the text it continues, never at column 0."""
    lines = at_80("log", "info", str(FIXTURES / "holdout-llamacpp.specmon")).stdout.splitlines()
    for said, under in (
        ("target smollm2-135m-instruct (llama.cpp) drafter ngram float32 on cpu backend llamacpp", 4),
        ("host: hostname vm, platform Linux-6.18.44-fc-v1147-x86_64-with-glibc2.36, python 3.11.7, cpus 2", 8),
        ("verify cost, plain steps, T = 1..9 positions: 1.00 1.72 2.13 2.43 3.02 3.39 3.91 3.97 4.50", 4),
    ):
        (at,) = [i for i, line in enumerate(lines) if line.startswith("  " + said.split()[0] + " ")]
        assert_hung(lines, at, under, said)


def test_log_infos_busy_host_line_wraps_under_its_value(tmp_path):
    """A host busy for every round: the line (89 columns) goes on under `busy:`, column 19."""
    from specmon.events.log import LogWriter
    from specmon.events.schema import PromptStarted, Sampling
    from events import round_verified

    log = tmp_path / "busy.specmon"
    with LogWriter(log) as writer:
        run = {"session_id": "s", "t": 1_700_000_000.0, "prompt_id": "p", "prompt_class": "chat", "draft_len": 2}
        writer.write(PromptStarted(**run, drafter="ngram", sampling=Sampling(), prompt_tokens=5, max_new_tokens=9))
        drafted = {"proposed": [1, 1], "accepted": 1, "rejection_pos": 1, "emitted": [1, 1]}
        for i in range(20):  # each round 9 of its 12 ms waiting for a CPU
            writer.write(round_verified(**run, **drafted, round_id=i, round_index=i, verify_ms=12.0, host_stall_ms=9.0))
    lines = at_80("log", "info", str(log)).stdout.splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.startswith("  host  ")]
    assert_hung(lines, at, 19, "host busy: 20 of 20 rounds disturbed (100.0%), peak 75% of a round,")


def test_served_lines_wrap_under_their_value(monkeypatch):
    """A watch or proxy log's `served traffic` and `totals` lines (from metrics.served_summary) go on
    under their value, column 19, as the host line does."""
    import io

    from rich.console import Console

    from specmon.cli import inspect
    from specmon.metrics.served_summary import info_lines

    printed = io.StringIO()
    monkeypatch.setattr(inspect, "out", Console(file=printed, width=WIDTH))
    served = {"reads": 38, "url": "http://127.0.0.1:8080", "kind": "llama-server", "restarts": 0, "failed_reads": 0}
    served |= {
        "total_line": "21:38:33, 37 s: drafts 1  draft tokens 17  accepted 4  acceptance 0.24",
        "first_failure": "",
    }
    lines = info_lines(served)
    for label, value in lines:
        inspect.print_hanging(label, value)
    printed = printed.getvalue().splitlines()
    assert all(len(line) <= WIDTH for line in printed) and len(printed) > len(lines), printed
    starts = [i for i, line in enumerate(printed) if not line.startswith(" " * 19)]
    assert [printed[i][:19] for i in starts] == [label for label, _ in lines]  # each value goes on under itself
    assert " ".join(printed).split() == " ".join(label + value for label, value in lines).split()


def test_a_proxy_logs_table_and_advice_fit_80_columns_whole_and_hung():
    """The per-class table keeps its headers and `not reported` whole at 80 columns (a class name as
    long as the rules allow folds instead), and advice lines go on indented under themselves."""
    import io

    from rich.console import Console

    from events import request_timed
    from specmon.proxy.tables import tally_summary
    from events import tally_of

    events = []
    for name in ("chat", "a-long-name-here"):  # 16 characters of the 40 a class name may have
        for i, upstream in enumerate(["spec"] * 3 + ["plain"] * 2):
            drafted = {"draft_n": 20, "draft_n_accepted": 9} if name == "chat" and upstream == "spec" else {}
            events.append(
                request_timed(
                    request_id=f"{name}-{i}", prompt_class=name, upstream=upstream, predicted_n=40,
                    predicted_ms=900.0 + 50 * i, **drafted,
                )
            )  # fmt: skip
    printed = io.StringIO()
    Console(file=printed, width=WIDTH).print(tally_summary(tally_of(events), None))
    lines = printed.getvalue().splitlines()
    assert all(cell_len(line) <= WIDTH for line in lines), lines
    header = next(line for line in lines if line.startswith("class"))
    assert header.split() == ["class", "upstream", "requests", "drafted", "accepted", "acceptance", "tok/step", "tok/s"]
    assert [line.split()[:2] for line in lines if "not reported" in line] == [["a-long-name-here", "spec"]]
    assert [line.split()[:2] for line in lines if line.endswith(" -      N/A  37.2")] == [
        ["a-long-name-here", "plain"],
        ["chat", "plain"],
    ]  # the plain side is not meant to draft: '-', not 'not reported'
    advice = lines[lines.index("advice per class (95% intervals over requests):") + 1 :]
    (at,) = [i for i, line in enumerate(advice) if line.startswith("  a-long-name-here: ")]
    assert_hung(advice, at, 6, "a-long-name-here: spec/plain goodput 1.13x [1.07, 1.20], 3 spec vs 2 plain requests")
    verdict = next(line for line in advice[at + 1 :] if not line.startswith(" " * 6))
    assert verdict.startswith("    speculation pays;"), advice  # the verdict on a line of its own, hung under the class
    assert advice[-3].startswith("advice only: ") and advice[-2].startswith("  nothing is changed"), advice


def test_log_infos_position_figures_say_a_trailing_run_at_zero_once():
    """llama-server counts a position per --draft-max (48 in a trial): those no draft got past are one cell."""
    from types import SimpleNamespace

    from specmon.metrics.served_summary import positions

    reached_four = SimpleNamespace(position_rates=lambda: [1.0, 1.0, 0.5, 0.25] + [0.0] * 44)
    assert positions(reached_four) == "1.00 1.00 0.50 0.25 4-47: 0.00"
    two_zeros = SimpleNamespace(position_rates=lambda: [1.0, 0.0, 0.0])  # as short written out: kept
    assert positions(two_zeros) == "1.00 0.00 0.00"


def every_command(parser, words: tuple[str, ...] = ()):
    """(words, parser) for `specmon` and each of its commands, their actions and tools, however deep."""
    yield words, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                yield from every_command(command, (*words, name))


def test_every_commands_help_fits_80_columns(monkeypatch):
    """`--help` at COLUMNS=80 (argparse wraps to it): the examples, once up to 113 columns, and
    the tools' example commands (82, 81) fit too, an example's note going on under it."""
    from specmon.cli.main import build_parser

    monkeypatch.setenv("COLUMNS", str(WIDTH))
    wide = {
        " ".join(words) or "specmon": [line for line in command.format_help().splitlines() if cell_len(line) > WIDTH]
        for words, command in every_command(build_parser())
    }
    assert len(wide) > 20 and {words: lines for words, lines in wide.items() if lines} == {}


def test_an_examples_note_goes_on_under_it_where_the_line_is_too_long(monkeypatch):
    from specmon.cli.main import build_parser

    monkeypatch.setenv("COLUMNS", str(WIDTH))
    lines = build_parser().format_help().splitlines()
    at = lines.index("  specmon serve --headless --port 8000")
    assert lines[at + 1] == "      OpenAI-compatible server: point a chat UI or the openai SDK at it"
    assert "  specmon run --headless --drafter layerskip -k 2" in lines  # an example with no note: as written


@pytest.mark.parametrize("name", shipped("policies"))
def test_policy_show_fits_80_columns(name):
    """The shipped policies' comments (once up to 111 columns) fit, as `policy show` prints them to copy."""
    done = at_80("policy", "show", name)
    assert done.returncode == 0 and "[policy]" in done.stdout, done.stderr
    assert wide_lines(done) == []


def test_an_error_wraps_at_words_under_a_hanging_indent(short_dir):
    """A policy's error (once 102 columns on one line) is one message in lines of 80 at most, each
    continuation indented; piped with no COLUMNS it stays one line, for a script to find whole."""
    bad = short_dir / "bad.toml"
    bad.write_text('[policy]\nmode = "enforc"\n\n[[classes]]\nname = "chat"\ndefault = true\n')
    done = at_80("policy", "check", str(bad))
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) > 1 and wide_lines(done) == []
    assert all(line.startswith("  ") for line in lines[1:]) and lines[0].startswith(f"specmon: {bad}:2:")
    (message,) = unwrapped(lines)
    assert message.endswith(" policy.mode: Invalid enum value 'enforc' (one of: enforce, advise)")
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    piped = subprocess.run([sys.executable, "-m", "specmon.cli", "policy", "check", str(bad)], capture_output=True,
                           text=True, cwd=REPO, env=env, timeout=300)  # fmt: skip
    assert piped.stderr.splitlines() == [message]


def test_a_usage_mistake_wraps_keeping_its_pointer_to_help_whole():
    """argparse's refusal of `policy edit` (once 134 columns) wraps too; `(see ... --help)` stays on one line."""
    done = at_80("policy", "edit")
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) > 1 and wide_lines(done) == []
    assert lines[0].startswith("specmon: argument ACTION: invalid choice: 'edit'") and lines[1].startswith("  ")
    assert lines[-1].endswith(" (see `specmon policy --help`)")
    assert "'set', 'tune'" in unwrapped(lines)[0]


def test_log_infos_refused_reload_wraps_under_its_text(tmp_path):
    """A reload refused for a long reason (92 columns in a trial, not wrapped) goes on under `refused:`."""
    from specmon.events.log import LogWriter
    from specmon.events.schema import PolicyLoaded

    log = tmp_path / "reloads.specmon"
    source = "/tmp/trial2/srv.toml"
    error = f"{source}:11:1: policy.min_gain: Expected `float`, got `str`"
    with LogWriter(log) as writer:
        for t, accepted in ((1_700_000_000.0, True), (1_700_000_062.1, False)):
            writer.write(PolicyLoaded(session_id="s", t=t, source=source, sha256="0" * 64, text="", accepted=accepted,
                                      error="" if accepted else error))  # fmt: skip
    lines = at_80("log", "info", str(log)).stdout.splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.startswith("    +62.1 s refused: ")]
    assert_hung(lines, at, 12, f"+62.1 s refused: {error}")


def test_runs_table_title_keeps_its_log_path_whole_and_indented(short_dir):
    """The title `NAME: ngram policy FILE, greedy  (log: PATH)` (83 columns in a trial) wrapped at
    column 0 between `(log:` and its path; the path's phrase goes on whole, indented."""
    done, log = run_under_the_policy(short_dir)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.endswith(f"(log: {log})")]
    assert lines[at] == f"  (log: {log})" and lines[at - 1].endswith(" policy default.toml, greedy")
    assert wide_lines(done) == []


def messages(lines: list[str], first: str) -> list[list[str]]:
    """Each line starting with `first`, with the indented lines that continue it (a round's line is its own)."""
    found: list[list[str]] = []
    continuing = False
    for line in lines:
        if line.startswith(first):
            found.append([line])
            continuing = True
        elif continuing and line.startswith("  ") and not line.startswith("  round "):
            found[-1].append(line)
        else:
            continuing = False
    return found


MOVE = re.compile(r"\d+: \d+->\d+")  # a match length and what a whole draft after it keeps: `4: 6->2`


def assert_hung_with_moves_whole(lines: list[str]) -> None:
    """Decision lines at 80 columns: every continuation indented, no `N:` at a line's end, every move
    whole on one line, the words in order."""
    decisions = messages(lines, "decision ")
    assert decisions and any(len(message) > 1 for message in decisions)  # some wrapped
    for message in decisions:
        assert all(line.startswith("  ") for line in message[1:]) and all(cell_len(line) <= WIDTH for line in message)
        assert not any(re.search(r"\d+:$", line) for line in message), message
        words = " ".join(line.strip() for line in message)
        assert [move for line in message for move in MOVE.findall(line)] == MOVE.findall(words), message


def test_policy_explains_wrapped_lines_hang_and_keep_each_move_whole(monkeypatch):
    """Each decision (`... after a match of 3: 6->2, 4: 6->2 ...`) went on at column 0, splitting `4:`
    from `6->2`: now under a hanging indent, each move on one line."""
    import io

    from rich.console import Console

    from specmon.cli import inspect
    from specmon.policy.explain import Explanation

    printed = io.StringIO()
    monkeypatch.setattr(inspect, "out", Console(file=printed, width=WIDTH))
    for i, name in enumerate(["chat", "code-edit", "non-english"]):
        inspect.print_explanation(Explanation(long_moves(name, i), True, f"the same table from {8 * i} rounds"))
    assert_hung_with_moves_whole(printed.getvalue().splitlines())


def long_moves(name: str, decision_id: int):
    """A decision whose change (what_changed) names a move for each match length, 6->2 (`3: 6->2`)."""
    from decisions import gate_decision
    from specmon.policy import gate

    reaches = gate.MAX_REACH + 1
    return gate_decision(name, 6, 2, decision_id, reason=gate.changes([6] * reaches, [2] * reaches))


def test_attach_headless_wraps_its_session_and_decision_lines_hung(tmp_path):
    """The session line (`float32 on` / `cpu` in a trial) and each decision go on indented, whole phrases kept."""
    from specmon.events.log import LogWriter
    from specmon.events.schema import SessionFinished

    fixture = at_80("attach", "--headless", str(FIXTURES / "session-policy.specmon"))
    session = messages(fixture.stdout.splitlines(), "session ")[0]
    assert len(session) == 2 and session[1].startswith("  ") and "float32 on cpu" in session[1]
    log = tmp_path / "decided.specmon"
    with LogWriter(log) as writer:
        for i, name in enumerate(["chat", "code-edit", "non-english"]):
            writer.write(long_moves(name, i))
        writer.write(SessionFinished(session_id="s", t=1.0, rounds=0, reason="done"))
    done = at_80("attach", "--headless", str(log))
    assert done.returncode == 0, done.stderr
    assert_hung_with_moves_whole(done.stdout.splitlines())


def test_a_word_longer_than_the_line_is_folded_under_the_indent_not_cut():
    import io

    from rich.console import Console

    from specmon.text import Hanging

    path = "/tmp/pytest-of-root/pytest-415/a_very_long_directory_name/x.specmon"
    printed = io.StringIO()
    Console(file=printed, width=40).print(Hanging(f"log: {path}  plots: here"))
    lines = printed.getvalue().splitlines()
    assert lines[0] == "log:" and all(line.startswith("  ") for line in lines[1:]), lines
    assert "".join(line.strip() for line in lines[1:-1]) == path and lines[-1] == "  plots: here", lines
    assert max(len(line) for line in lines) == 40


def test_the_class_tables_legend_keeps_each_mark_with_its_meaning():
    """At 80 columns the legend once wrapped `! noise` as `!` / `noise`: a symbol with no meaning beside it."""
    done = at_80("log", "info", str(FIXTURES / "session-v2.specmon"))
    legend = done.stdout[done.stdout.index("prompts: decoded at that k") :].splitlines()
    assert max(map(cell_len, legend)) <= WIDTH
    for phrase in ("? not yet known", "! noise", "~ busy host"):
        assert any(phrase in line for line in legend), (phrase, legend)
    assert not any(line.rstrip().endswith((" ?", " !", " ~", "(?", "(!")) for line in legend)


def test_no_help_splits_a_value_or_command_at_a_hyphen(monkeypatch):
    """`torch-` / `nopad` in bench engines' help, `jq 'select(.type ==` / `"RoundVerified") | .accepted'` in
    log dump's: a help line breaks at spaces only, and a command to copy is an example line of its own."""
    from specmon.cli.main import build_parser

    monkeypatch.setenv("COLUMNS", str(WIDTH))
    split = {
        " ".join(words): [line for line in command.format_help().splitlines() if re.search(r"\w-$", line)]
        for words, command in every_command(build_parser())
    }
    assert {words: lines for words, lines in split.items() if lines} == {}
    helps = {" ".join(words): command.format_help() for words, command in every_command(build_parser())}
    engines = helps["bench engines"]
    assert "torch-fp32, torch-nopack,\n" in engines and " torch-nopad, llamacpp" in engines
    jq = "  specmon log dump LOG | jq 'select(.type == \"RoundVerified\") | .accepted'"
    assert jq in helps["log dump"].splitlines()
