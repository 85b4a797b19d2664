"""The CLI as a user meets it: real subprocesses, real model, one-line errors."""

import json
from pathlib import Path

import pytest

from specmon.events.log import read_log
from specmon.metrics.stats import class_stats, summary
from specmoncli import specmon
from tinymodel import write_tiny_gguf

REPO = Path(__file__).resolve().parent.parent


def assert_one_line_error(done, *fragments):
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def write_profile(tmp_path, body: str) -> Path:
    path = tmp_path / "p.toml"
    path.write_text(body)
    return path


BASE = 'name = "t"\n[target]\nmodel = "smollm2-135m-instruct"\n'


def test_unknown_key_in_a_profile(tmp_path):
    done = specmon(
        "run", "--headless", "--profile", str(write_profile(tmp_path, BASE + "[drafter]\nkindd = 'ngram'\n"))
    )
    assert_one_line_error(done, "p.toml", "kindd")


def test_missing_model_file(tmp_path):
    done = specmon(
        "run", "--headless", "--profile", str(write_profile(tmp_path, 'name = "t"\n[target]\npath = "nope.gguf"\n'))
    )
    assert_one_line_error(done, "nope.gguf", "does not exist")


def test_missing_profile():
    assert_one_line_error(
        specmon("run", "--headless", "--profile", "no-such-profile"), "no-such-profile", "cannot read"
    )


def test_bad_prompt_file(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": 1, "prompt": "hi"}\n{"id": 2}\n')
    assert_one_line_error(specmon("run", "--headless", "--prompts", str(prompts)), "line 2", "prompt")


DIFFERENT_DRAFT = (
    'name = "t"\n[target]\npath = "t.gguf"\n[drafter]\nkind = "model"\n[drafter.target]\npath = "o.gguf"\n'
)


def test_draft_and_target_vocabularies_that_differ(tmp_path):
    write_tiny_gguf(tmp_path / "t.gguf")
    write_tiny_gguf(tmp_path / "o.gguf", vocab=["a", "b", "c", "d"])
    done = specmon("run", "--headless", "--profile", str(write_profile(tmp_path, DIFFERENT_DRAFT)))
    assert_one_line_error(done, "draft vocabulary (4 tokens, o.gguf)", "259 tokens")


def test_a_draft_vocabulary_that_differs_is_refused_before_the_target_loads(tmp_path, monkeypatch):
    from specmon.backends import loader
    from specmon.backends.profiles import load_profile
    from specmon.errors import SpecmonError

    write_tiny_gguf(tmp_path / "t.gguf")
    write_tiny_gguf(tmp_path / "o.gguf", vocab=["a", "b", "c", "d"])
    monkeypatch.setattr(loader, "_model", lambda *a, **k: pytest.fail("weights loaded before the vocabulary check"))
    with pytest.raises(SpecmonError, match=r"draft vocabulary \(4 tokens"):
        loader.load_pair(load_profile(str(write_profile(tmp_path, DIFFERENT_DRAFT))))


def test_help_teaches():
    done = specmon("run", "--help")
    assert done.returncode == 0
    for flag in ("--headless", "--prompts", "--draft-len", "--temperature", "--json"):
        assert flag in done.stdout


@pytest.mark.slow
def test_headless_run_writes_json_and_a_log_that_replays_to_the_same_table(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        "\n".join(
            json.dumps(row)
            for row in [
                {
                    "id": "a",
                    "prompt": "Repeat exactly: the cat sat on the mat, the cat sat on the mat.",
                    "class": "copy",
                },
                {"id": "b", "prompt": "Say hello.", "class": "chat", "max_new_tokens": 6},
            ]
        )
    )
    out, log = tmp_path / "out.json", tmp_path / "s.specmon"
    done = specmon(
        "run",
        "--headless",
        "--prompts",
        str(prompts),
        "--max-new-tokens",
        "12",
        "-k",
        "3",
        "--json",
        str(out),
        "--log",
        str(log),
    )
    assert done.returncode == 0, done.stderr
    table = json.loads(out.read_text())
    assert set(table["classes"]) == {"copy", "chat"}
    for row in table["classes"].values():
        assert row["draft_len"] == 3 and row["greedy_identical"] is True
        assert row["rounds"] > 0 and row["baseline_tok_per_s"] > 0
    assert table["classes"]["chat"]["emitted"] <= 6
    replayed = json.loads(json.dumps(summary(class_stats(read_log(log)))))
    assert replayed == table
    info = specmon("log", "info", str(log))
    assert info.returncode == 0 and "integrity        ok" in info.stdout and "copy" in info.stdout


def test_committed_v1_log_still_replays():
    """A log written by specmon 0.1.0 (format 1), kept as a fixture: later schemas must read it."""
    fixture = REPO / "tests" / "fixtures"
    events = list(read_log(fixture / "session-v1.specmon"))
    expected = json.loads((fixture / "session-v1.json").read_text())
    got = json.loads(json.dumps(summary(class_stats(events))))
    assert list(got["classes"]) == list(expected["classes"])
    for name, row in expected["classes"].items():  # every figure it had then; later ones only add keys
        assert {key: got["classes"][name][key] for key in row} == row, name


def test_attach_without_a_running_session_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    done = specmon("attach", "--headless", env={**__import__("os").environ, "XDG_RUNTIME_DIR": str(tmp_path)})
    assert_one_line_error(done, "no running session")


def test_log_info_on_a_damaged_log_reports_the_offset_and_fails(tmp_path):
    damaged = tmp_path / "d.specmon"
    raw = (REPO / "tests" / "fixtures" / "session-v1.specmon").read_bytes()
    damaged.write_bytes(raw[:-7])
    done = specmon("log", "info", str(damaged))
    assert done.returncode == 1
    assert "damaged at byte" in done.stdout and "RoundVerified" in done.stdout


def test_attach_headless_prints_each_decision_with_what_it_changed_and_its_rule(live_session):
    from specmon.events.schema import Decision
    from specmon.policy.explain import what_changed

    log = live_session.log_path
    done = specmon("attach", "--headless", str(log))
    assert done.returncode == 0, done.stderr
    decisions = [e for e in read_log(log) if isinstance(e, Decision)]
    lines = [line for line in done.stdout.splitlines() if line.startswith("decision ")]
    assert len(lines) == len(decisions) > 0
    for line, d in zip(lines, decisions):
        change = what_changed(d)
        assert change  # a move of on/off, k or match, or of what a shorter draft keeps
        assert (
            line
            == f"decision {d.decision_id} [{d.prompt_class}] {change} by policy.min_gain, from {len(d.round_ids)} rounds"
        )


def test_log_info_says_when_a_log_has_no_end(tmp_path):
    from specmon.events.schema import SessionFinished
    from specmon.transport.channel import Channel, LogSink

    channel = Channel(LogSink(tmp_path / "open.specmon"))
    for ev in read_log(REPO / "tests" / "fixtures" / "session-tui.specmon"):
        if not isinstance(ev, SessionFinished):  # what a killed run leaves: whole frames, no end
            channel.publish(ev)
    channel.close()
    done = specmon("log", "info", str(tmp_path / "open.specmon"))
    assert done.returncode == 0
    assert (
        "  integrity        ok\n  ended            no end written: the run is still going, or was killed\n"
        in done.stdout
    )
    ended = specmon("log", "info", str(REPO / "tests" / "fixtures" / "session-tui.specmon"))
    assert "no end written" not in ended.stdout


def test_attach_headless_prints_the_busy_host_line_under_its_table_as_run_does(tmp_path):
    import os

    from events import round_verified
    from specmon.events.log import LogWriter
    from specmon.events.schema import SessionFinished

    log = tmp_path / "busy.specmon"
    with LogWriter(log) as writer:
        for i in range(10):  # 6 of 10 rounds stalled for half their time: a busy host
            stall = 5.0 if i < 6 else 0.0
            writer.write(round_verified(round_id=i, t=float(i), host_stall_ms=stall))
        writer.write(SessionFinished(session_id="s", t=10.0, rounds=10, reason="done"))
    env = {**os.environ, "COLUMNS": "80"}
    done = specmon("attach", "--headless", log, env=env)
    assert done.returncode == 0, done.stderr
    assert "per class" in done.stdout
    assert done.stderr.startswith("host busy: 6 of 10 rounds disturbed (60.0%), peak 50% of a round"), done.stderr


def test_the_main_help_names_each_models_action(monkeypatch):
    """`models --help` has list, pull and export; the main help's summary once said only list or pull."""
    from specmon.cli.main import build_parser

    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps to it: the summary fits on its line
    summary = next(line for line in build_parser().format_help().splitlines() if line.strip().startswith("models "))
    assert summary.split(None, 1)[1] == "list and pull embedded models; export a model as an HF folder"
    assert all(action in summary for action in ("list", "pull", "export"))


def test_run_help_says_a_policy_run_decodes_each_prompt_once():
    """run's description said only 'plainly and with the drafter'; under --policy a prompt is decoded once."""
    done = specmon("run", "--help")
    said = " ".join(done.stdout.split())
    assert "with --policy, decode each prompt once, as the policy decides." in said
    assert "choose k per class, each prompt decoded once (no plain run beside it;" in said


@pytest.mark.parametrize(
    "command, kept",
    [
        (["proxy", "--upstream", "http://127.0.0.1:9"], "every finished request"),
        (["watch", "http://127.0.0.1:9"], "every read"),
    ],
)
def test_an_interrupted_server_command_says_what_its_log_keeps(command, kept, monkeypatch, capsys):
    """A proxy's or a watch's log has no rounds: Ctrl-C says what it does keep."""
    import importlib

    from specmon.cli.main import main

    module = importlib.import_module(f"specmon.{command[0]}.command")

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(module, f"run_{command[0]}", interrupted)
    assert main(command) == 130
    assert capsys.readouterr().err.strip() == f"specmon: interrupted; the session log keeps {kept}"
