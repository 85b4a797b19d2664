"""Fault tier, policy side: a hot reload never ends a run (bad bytes, absurd numbers, hostile
names and regexes are refused like any invalid edit, and said so on stderr and in `log info`);
policy regexes run in linear time; `policy set` and `policy explain` meet bad input with one line;
and a run on the tiny model survives a stream of random edits to the file it watches."""

import contextlib
import io
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import tomlkit

from specmon.cli.main import main
from specmon.engine.draft_len import MAX_DRAFT_LEN
from specmon.engine.prompts import Prompt, builtin_suite
from specmon.events.log import read_log
from specmon.events.schema import Decision, PolicyLoaded, PromptFinished, PromptStarted, RoundVerified, SessionFinished
from specmon import textfile  # where the policy edit replaces its file
from specmon.policy.edit import set_value
from specmon.engine.costs import Costs
from specmon.policy.engine import PolicyEngine
from specmon.policy.schema import PolicyError, load_policy, parse_policy
from specmoncli import started
from tinymodel import tiny_profile
from waiting import wait_until

REPO = Path(__file__).resolve().parent.parent
DEFAULT = (
    REPO / "tests" / "fixtures" / "policy-ratio.toml"
).read_text()  # the default before intervals: these tests pin its lines
QUICK = (REPO / "policies" / "default.toml").read_text()  # the shipped policy: these tests pin its lines
FIXTURE = REPO / "tests" / "fixtures" / "session-policy.specmon"
OK_CLASS = '[[classes]]\nname = "all"\ndefault = true\n'
LOCATED = re.compile(r"^(?P<file>.+):(?P<line>\d+):(?P<col>\d+): ")


def _deep(levels: int) -> str:
    return "x = " + "[" * levels + "]" * levels


# (id, file bytes, the line the refusal must name, a fragment of its reason)
HOSTILE = [
    ("non-utf8", b"[policy]\nmode = 'enf\xffrce'\n" + OK_CLASS.encode(), 2, "not UTF-8 (byte 0xff)"),
    ("latin1-only", "[[classes]]\nname = 'café'\ndefault = true\n".encode("latin-1"), 2, "not UTF-8"),
    (
        "window-1e20",
        QUICK.replace("window = 256", "window = 100000000000000000000").encode(),
        12,
        "window = 100000000000000000000 is out of range",
    ),
    ("window-negative", QUICK.replace("window = 256", "window = -1").encode(), 12, "window = -1 is out of range"),
    ("int-of-5000-digits", ("[policy]\nwindow = " + "9" * 5000 + "\n" + OK_CLASS).encode(), 2, "4300 digits"),
    ("min-gain-inf", QUICK.replace("min_gain = 0.02", "min_gain = inf").encode(), 11, "min_gain = inf"),
    ("min-gain-nan", QUICK.replace("min_gain = 0.02", "min_gain = nan").encode(), 11, "min_gain = nan"),
    ("min-gain-1e400", QUICK.replace("min_gain = 0.02", "min_gain = 1e400").encode(), 11, "min_gain = inf"),
    ("class-name-markup", QUICK.replace('name = "chat"', 'name = "[/]"').encode(), 36, "class name '[/]'"),
    ("class-name-empty", QUICK.replace('name = "chat"', 'name = ""').encode(), 36, "class name ''"),
    ("min-chars-negative", (OK_CLASS + "match.min_chars = -3\n").encode(), 4, "match.min_chars = -3"),
    (
        "regex-lookahead",
        ('[[classes]]\nname = "x"\nmatch.regex = ["a(?=b)"]\n' + OK_CLASS).encode(),
        3,
        "bad regular expression 'a(?=b)'",
    ),
    (
        "regex-backreference",
        ('[[classes]]\nname = "x"\nmatch.regex = ["(a)\\\\1"]\n' + OK_CLASS).encode(),
        3,
        "bad regular expression",
    ),
    ("deeply-nested", ("[policy]\n" + _deep(5000) + "\n" + OK_CLASS).encode(), 2, "nested too deeply"),
    ("oversized", b"# " + b"x" * (1 << 20) + b"\n" + OK_CLASS.encode(), 1, "larger than 1024 KiB"),
]


def _write(path: Path, data: bytes, serial: int) -> None:
    """Replace the file at once, its mtime set past any earlier write's: a reload sees every write."""
    tmp = path.with_name(f".{path.name}.{serial}.tmp")
    tmp.write_bytes(data)
    stamp = 1_700_000_000_000_000_000 + serial * 1_000_000
    os.utime(tmp, ns=(stamp, stamp))
    os.replace(tmp, path)


@pytest.mark.parametrize("case,data,line,reason", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_a_hostile_reload_is_refused_with_its_location_and_the_old_policy_stays(tmp_path, case, data, line, reason):
    path = tmp_path / "p.toml"
    _write(path, QUICK.encode(), 0)
    engine = PolicyEngine(load_policy(path), "s", Costs((10.0, 12.0, 14.0, 16.0, 18.0, 20.0, 22.0, 24.0, 26.0)))
    old = engine.policy
    _write(path, data, 1)
    refused = engine.maybe_reload()
    assert refused is not None and refused.accepted is False and refused.sha256 == ""
    found = LOCATED.match(refused.error)
    assert found and found["file"] == str(path) and int(found["line"]) == line, refused.error
    assert reason in refused.error and "\n" not in refused.error
    assert engine.policy is old
    assert engine.maybe_reload() is None  # the same refused file is not reported twice
    _write(path, QUICK.replace("min_gain = 0.02", "min_gain = 0.1").encode(), 2)
    taken = engine.maybe_reload()  # and the next valid edit is taken as usual
    assert taken.accepted and engine.policy.settings.min_gain == 0.1


@pytest.mark.parametrize("case,data,line,reason", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_policy_check_refuses_what_a_reload_refuses_in_one_line(tmp_path, capsys, case, data, line, reason):
    path = tmp_path / "p.toml"
    path.write_bytes(data)
    assert main(["policy", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"specmon: {path}:{line}:") and reason in err, err


def test_a_byte_order_mark_and_crlf_line_endings_are_read_as_the_same_policy(tmp_path):
    plain = parse_policy(QUICK, "p.toml")
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + QUICK.replace("\n", "\r\n").encode())
    read = load_policy(path)
    assert (read.settings, read.classes, read.sha256) == (plain.settings, plain.classes, plain.sha256)
    assert read.warnings == []


# -- regexes ---------------------------------------------------------------------------------

CATASTROPHIC = '[[classes]]\nname = "aaa"\nmatch.regex = ["(a+)+$"]\n' + OK_CLASS


def test_a_catastrophic_regex_matches_and_fails_at_once():
    """Python's re takes about 2**40 steps on the failing text; RE2 is linear. In a child process,
    so the old engine fails by timeout instead of hanging the suite."""
    script = (
        "import sys; from specmon.policy.schema import parse_policy; "
        "from specmon.policy.classify import classify; p = parse_policy(sys.argv[1]); "
        "print(classify(p, 'a' * 40 + '!')[0], classify(p, 'a' * 40)[0], classify(p, 'a' * 100_000 + '!')[0])"
    )
    try:  # 2**40 backtracking steps take hours: a backtracking engine cannot finish within this limit
        done = subprocess.run([sys.executable, "-c", script, CATASTROPHIC], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("classify never finished on (a+)+$: the regex engine backtracks")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["all", "aaa", "all"]


def test_policy_regexes_keep_their_meaning_under_re2():
    from specmon.policy.classify import classify

    policy = load_policy(REPO / "tests" / "fixtures" / "policy-ratio.toml")  # the shipped default has no regex now
    code = "Please refactor:\n\ndef mean(xs):\n    return sum(xs) / len(xs)\n"
    line = policy.line_of("classes", 0, "match", "regex")
    assert classify(policy, code) == ("code-edit", f"classes[0].match.regex (line {line})")
    assert classify(policy, "What is the capital of France?")[0] == "chat"
    assert classify(policy, "Объясни, почему небо голубое.")[0] == "non-english"


# -- `policy set` ----------------------------------------------------------------------------


@pytest.fixture
def policy_file(tmp_path) -> Path:
    path = tmp_path / "p.toml"
    path.write_text(DEFAULT)
    return path


@pytest.mark.parametrize(
    "key,value,fragment",
    [
        ("classes[99].draft_len", "3", "no 'classes[99]': the file has 5 (0..4)"),
        ("policy.mode.x", "3", "'policy.mode.x' does not name a key in a table"),
        ("policy[0].mode", "'advise'", "'policy[0]': 'policy' is not a list"),
        ("classes.nobody.speculate", "off", "no class named 'nobody'"),
        ("classes.speculate", "off", "name a class"),
        ("classes.chat.speculate", '"on"\n[evil]', "is not one TOML value"),
        ("classes.chat.speculate", "on\n[evil]", "is not one TOML value"),
        ("classes.chat.draft_len", "4 5", "is not one TOML value"),
        ("classes.chat.draft_len", "[" * 3000 + "]" * 3000, "is not one TOML value"),
        ("policy.min_gian", "0.1", "'policy.min_gian' is not a key a policy has; the file is unchanged"),
    ],
)
def test_policy_set_refuses_a_bad_key_or_value_in_one_line(policy_file, capsys, key, value, fragment):
    assert main(["policy", "set", str(policy_file), key, value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err, err
    assert policy_file.read_text() == DEFAULT


@pytest.mark.parametrize(
    "data,where",
    [
        (b"[policy]\nmode = 'enforce\n" + OK_CLASS.encode(), ":2:"),
        (b"[policy]\nmode = [1,\n", ":2:"),
        (b"[policy]\n" + _deep(5000).encode() + b"\n" + OK_CLASS.encode(), ":2:"),
        (b"[policy]\nmode = 'x\xff'\n" + OK_CLASS.encode(), ":2:10: not UTF-8"),
    ],
    ids=["unclosed-string", "unclosed-array", "deeply-nested", "non-utf8"],
)
def test_policy_set_on_a_broken_file_says_where_in_one_line(tmp_path, capsys, data, where):
    path = tmp_path / "p.toml"
    path.write_bytes(data)
    assert main(["policy", "set", str(path), "policy.mode", "advise"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"specmon: {path}{where}"), err
    assert path.read_bytes() == data


def test_policy_set_keeps_crlf_line_endings_and_a_byte_order_mark(tmp_path):
    path = tmp_path / "p.toml"
    original = b"\xef\xbb\xbf" + DEFAULT.replace("\n", "\r\n").encode()
    path.write_bytes(original)
    set_value(path, "policy.min_gain", "0.08")
    set_value(path, "classes.rewrite.default", "false")  # a key the file did not have: added as a new line
    data = path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf") and b"\n" not in data.replace(b"\r\n", b"")
    assert data.count(b"\r\n") == original.count(b"\r\n") + 1
    assert data.replace(b"min_gain = 0.08", b"min_gain = 0.03").replace(b"default = false\r\n", b"") == original
    assert load_policy(path).settings.min_gain == 0.08


def test_policy_set_writes_through_a_symlink_and_keeps_it(tmp_path):
    target = tmp_path / "real" / "p.toml"
    target.parent.mkdir()
    target.write_text(DEFAULT)
    os.chmod(target, 0o640)
    link = tmp_path / "p.toml"
    link.symlink_to(target)
    set_value(link, "classes.chat.speculate", "off")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert load_policy(target).classes[-1].speculate == "off"
    assert os.stat(target).st_mode & 0o777 == 0o640
    assert sorted(p.name for p in target.parent.iterdir()) == ["p.toml"]  # no temporary file left


def test_policy_set_fsyncs_the_directory_after_the_rename(policy_file, monkeypatch):
    synced: list[tuple[str, bool]] = []  # (what, after the rename?)
    renamed = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        kind = "dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "file"
        synced.append((kind, bool(renamed)))
        real_fsync(fd)

    def replace(src, dst):
        real_replace(src, dst)
        renamed.append(dst)

    monkeypatch.setattr(textfile.os, "fsync", fsync)
    monkeypatch.setattr(textfile.os, "replace", replace)
    set_value(policy_file, "policy.min_gain", "0.05")
    assert synced == [("file", False), ("dir", True)]


def test_policy_set_a_class_whose_name_holds_a_dot(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text('[[classes]]\nname = "v1.2"\n\n' + OK_CLASS)
    set_value(path, "classes.v1.2.speculate", "off")
    assert load_policy(path).classes[0].speculate == "off"


# -- `policy explain` ------------------------------------------------------------------------


def test_explain_of_a_decision_the_log_does_not_hold_says_which_it_has(capsys):
    ids = [e.decision_id for e in read_log(FIXTURE) if isinstance(e, Decision)]
    assert main(["policy", "explain", str(FIXTURE), "999"]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"specmon: no decision 999 in {FIXTURE} (it has {min(ids)}..{max(ids)})\n"
    assert captured.out == ""


def test_explain_of_a_log_without_decisions_says_so(tmp_path, capsys):
    log = _plain_log(tmp_path)
    assert main(["policy", "explain", str(log), "0"]) == 2
    assert capsys.readouterr().err == f"specmon: {log} holds no policy decisions\n"
    assert main(["policy", "explain", str(log)]) == 0
    assert capsys.readouterr().out == f"{log} holds no policy decisions\n"


def test_explain_of_a_log_cut_mid_frame_explains_the_decisions_before_the_cut(tmp_path, capsys, live_session):
    data = live_session.log_path.read_bytes()
    cut = tmp_path / "cut.specmon"
    cut.write_bytes(data[:-7])  # a copy cut short (or a full disk): the last frame is partial
    whole = [e.decision_id for e in read_log(live_session.log_path) if isinstance(e, Decision)]
    assert main(["policy", "explain", str(cut)]) == 1  # not a clean pass: part of the log is gone
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{cut}: damaged at byte ") and out[0].endswith("; explaining what precedes it")
    assert [line.split()[1] for line in out[1:-1]] == [str(i) for i in whole]
    assert all(": reproduces: " in line for line in out[1:-1])
    assert out[-1] == f"{len(whole)} of {len(whole)} decisions reproduce from what they cite"


def _plain_log(tmp_path: Path) -> Path:
    """A real session on the tiny model, without a policy: no decisions in it."""
    from specmon.backends.loader import load_pair
    from specmon.backends.profiles import DrafterSpec, load_profile
    from specmon.sched.pairing import run_paired
    from specmon.transport.session import live_session

    profile = load_profile(str(tiny_profile(tmp_path)))
    pair = load_pair(profile, DrafterSpec(kind="ngram", draft_len=3))
    with live_session(pair, profile, tmp_path / "plain.specmon", serve=False, announce=False) as session:
        run_paired(session.driver, builtin_suite(["chat"])[:1], pair.drafter, 3, profile.sampling.to_event(), 8)
    return session.log_path


# -- a live run that meets every hostile edit ------------------------------------------------


@pytest.fixture(scope="module")
def reload_run(tmp_path_factory):
    """The tiny model decodes one prompt per edit; after each, the next edit of HOSTILE (and a valid
    one between) replaces the policy file. The events, the lines on stderr, and what was written."""
    from specmon.backends.loader import load_pair
    from specmon.backends.profiles import DrafterSpec, load_profile
    from specmon.sched.policy import PolicyScheduler
    from specmon.transport.session import live_session

    tmp = tmp_path_factory.mktemp("reload")
    path = tmp / "p.toml"
    _write(path, QUICK.encode(), 0)
    edits = []
    for i, (case, data, _, _) in enumerate(HOSTILE):
        valid = QUICK.replace("min_gain = 0.02", f"min_gain = 0.0{i % 10}").encode()
        edits += [(case, data, False), (f"valid-{i}", valid, True)]
    edits.append(("bom-crlf", b"\xef\xbb\xbf" + CATASTROPHIC.replace("\n", "\r\n").encode(), True))
    prompts = (builtin_suite() * 2)[: len(edits) + 1]  # an edit is read at the next prompt's first round
    prompts += [Prompt("forty-a-and-bang", "a" * 40 + "!", "default"), Prompt("forty-a", "a" * 40, "default")]
    profile = load_profile(str(tiny_profile(tmp)))
    pair = load_pair(profile, DrafterSpec(kind="ngram", draft_len=4))
    stderr = io.StringIO()
    policy = load_policy(path)
    with contextlib.redirect_stderr(stderr):
        with live_session(pair, profile, tmp / "run.specmon", serve=False, policy=policy, announce=False) as session:
            scheduler = PolicyScheduler(
                session.driver, PolicyEngine(policy, session.session_id, session.costs), pair.drafter, poll_s=0.0
            )  # a look every round: each edit lands at the next prompt
            written = lambda done: done <= len(edits) and _write(path, edits[done - 1][1], done)  # noqa: E731
            scheduler.run(prompts, profile.sampling.to_event(), 12, written)
    return list(read_log(session.log_path)), stderr.getvalue(), edits, session.log_path, str(path)


def test_a_run_takes_every_valid_edit_and_refuses_every_hostile_one(reload_run):
    events, _, edits, _, source = reload_run
    loads = [e for e in events if isinstance(e, PolicyLoaded)]
    assert loads[0].accepted and len(loads) == 1 + len(edits)
    assert [e.accepted for e in loads[1:]] == [accepted for _, _, accepted in edits]
    for ev, (case, data, accepted) in zip(loads[1:], edits):
        if accepted:
            assert ev.sha256 == parse_policy(data.decode("utf-8-sig").replace("\r\n", "\n")).sha256, case
        else:
            assert ev.error.startswith(f"{source}:") and LOCATED.match(ev.error), (case, ev.error)
    finished = [e for e in events if isinstance(e, PromptFinished)]
    assert len(finished) == len(edits) + 3  # every prompt decoded, the 40 a's last, under `(a+)+$`
    started = {e.prompt_id: e.prompt_class for e in events if isinstance(e, PromptStarted)}
    assert (started["forty-a-and-bang"], started["forty-a"]) == ("all", "aaa")
    assert isinstance(events[-1], SessionFinished) and events[-1].reason == "done"


def test_a_headless_run_says_each_reload_in_one_line_on_stderr(reload_run):
    _, stderr, edits, _, source = reload_run
    lines = [line for line in stderr.splitlines() if line.startswith("specmon: policy")]
    assert len(lines) == len(edits)
    for line, (case, _, accepted) in zip(lines, edits):
        if accepted:
            assert re.fullmatch(
                rf"specmon: policy reloaded from {re.escape(source)} \(sha256 [0-9a-f]{{12}}\); "
                r"changed: [^;]+; each class runs by it from its next prompt",
                line,
            ), line
        else:
            assert line.startswith(f"specmon: policy edit refused, the previous policy stays in force: {source}:"), line


def test_log_info_lists_every_reload_taken_or_refused_and_the_policy_at_the_end(reload_run, capsys):
    events, _, edits, log, source = reload_run
    assert main(["log", "info", str(log)]) == 0
    out = capsys.readouterr().out.splitlines()
    refused = sum(not accepted for *_, accepted in edits)
    loads = [e for e in events if isinstance(e, PolicyLoaded)]
    assert loads[1 + [a for *_, a in edits].index(False)].error.startswith(f"{source}:2:12: not UTF-8")
    at = out.index(f"  policy reloads   {len(edits) - refused} taken, {refused} refused")
    listed = out[at + 1 : at + 1 + len(edits)]
    for line, ev in zip(listed, loads[1:]):
        said = (
            f"taken, changed {', '.join(ev.changed) or 'nothing a class runs by'}"
            if ev.accepted
            else f"refused: {ev.error}"
        )
        assert line == f"    +{ev.t - events[0].t:.1f} s {said}", (line, ev)
    end = [e for e in loads if e.accepted][-1]
    assert out[at + 1 + len(edits)] == f"  policy at the end sha256 {end.sha256[:16]}…" and end is not loads[0]


# -- hot-reload fuzzing: a real run while random bytes and policies replace its file ---------------

NAMES = ["rewrite", "chat", "code-edit", "v1.2", "x_y"]
REGEXES = ["```", "(a+)+$", r"(?m)^\s*def\b", "[0-9]{3,}", "(x|y)*z"]


def _random_policy(rng: random.Random) -> dict:
    settings = {
        "mode": rng.choice(["enforce", "advise"]),
        "window": rng.randint(1, 300),
        "min_gain": round(rng.uniform(-0.5, 2), 3),
    }
    if rng.random() < 0.3:  # an older file's keys: read with a warning
        settings.update({"evidence_window": rng.randint(1, 200), "hysteresis": round(rng.uniform(0, 2), 3)})
    classes = []
    for name in rng.sample(NAMES, rng.randint(1, len(NAMES))):
        low = rng.randint(1, MAX_DRAFT_LEN)
        draft_len = (
            rng.randint(0, MAX_DRAFT_LEN)
            if rng.random() < 0.4
            else {"min": low, "max": rng.randint(low, MAX_DRAFT_LEN), "adapt": rng.choice(["goodput", "none"])}
        )
        match = rng.choice(
            [
                {},
                {"keywords": rng.sample(["rewrite", "summarize", "why", "the"], 2)},
                {"regex": rng.sample(REGEXES, 2)},
                {"min_chars": rng.randint(0, 300)},
            ]
        )
        classes.append(
            {
                "name": name,
                "speculate": rng.choice(["auto", "auto", "on", "off"]),
                "draft_len": draft_len,
                "match": match,
            }
        )
    classes[-1]["default"] = True
    return {"policy": settings, "classes": classes}


HOSTILE_VALUES = [10**20, -1, float("nan"), float("inf"), "", "[/]", "(?=x)", 99, 0, 10**300]


def _mutate(rng: random.Random, doc: dict) -> bytes:
    """A random edit: valid, one hostile value, broken TOML, non-UTF-8 or random bytes."""
    kind = rng.choice(["valid", "valid", "value", "value", "truncated", "flipped", "random", "bom-crlf"])
    if kind == "value":
        table = rng.choice([doc["policy"], rng.choice(doc["classes"])])
        table[rng.choice(sorted(table))] = rng.choice(HOSTILE_VALUES)
    text = tomlkit.dumps(doc).encode()
    if kind == "truncated":
        return text[: rng.randrange(len(text))]
    if kind == "flipped":
        data = bytearray(text)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    if kind == "random":
        return rng.randbytes(rng.randint(0, 600))
    if kind == "bom-crlf":
        return b"\xef\xbb\xbf" + text.replace(b"\n", b"\r\n")
    return text


def _expected(data: bytes, scratch: Path) -> str | None:
    """The sha256 the run must log on taking this file, or None where it must refuse it."""
    scratch.write_bytes(data)
    try:
        return load_policy(scratch).sha256
    except PolicyError:
        return None


class Lines:
    """A child's stderr, read on a thread: its `specmon: policy` lines, as they come."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.reloads: list[str] = []
        self.all: list[str] = []
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            with self.changed:
                self.all.append(line.rstrip("\n"))
                if line.startswith("specmon: policy "):
                    self.reloads.append(line.rstrip("\n"))
                self.changed.notify_all()

    def wait(self, until, timeout: float = 30) -> bool:
        """Whether until(reload lines) came true before the run ended or the timeout passed."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not until(self.reloads) and self.proc.poll() is None and time.monotonic() < deadline:
                self.changed.wait(0.05)
            return until(self.reloads)


def _awaited_writes(lines: Lines, path: Path, rng: random.Random, scratch: Path) -> list[str | None]:
    """Atomic writes, each awaited until the run reads it, while the run goes on: per write read,
    the sha256 the run must take, or None where it must refuse."""
    expected: list[str | None] = []
    for serial in range(2, 5000):
        data = _mutate(rng, _random_policy(rng))
        want, before = _expected(data, scratch), len(lines.reloads)
        _write(path, data, serial)
        if not lines.wait(lambda reloads: len(reloads) > before):
            break  # the run ended before its next round: this write was never read
        expected.append(want)
    return expected


@pytest.mark.slow
def test_hot_reload_fuzz_never_ends_the_run(tmp_path):
    """First in-place writes as editors make them (truncate, write: the run may read a half-written
    file), back to back until the run has read ten of them, then atomic writes, each awaited: every
    one must be read once and judged as `policy check` judges it. The run must end as if nothing had
    happened. A run looks at its policy between prompts, so it decodes many short ones."""
    rng = random.Random(16)
    path, log, scratch = tmp_path / "watched.toml", tmp_path / "fuzz.specmon", tmp_path / "scratch" / "p.toml"
    scratch.parent.mkdir()
    _write(path, QUICK.encode(), 0)
    prompts = tmp_path / "many.jsonl"
    prompts.write_text(
        "".join(
            json.dumps(
                {
                    "id": f"p{i}",
                    "prompt": "Rewrite this: the cat sat on the mat." if i % 2 else "Tell me about the sea.",
                }
            )
            + "\n"
            for i in range(600)
        )
    )
    flags = ["--policy", path, "--max-new-tokens", 6, "--prompts", prompts, "--log", log]
    env = {**os.environ, "SPECMON_POLICY_POLL_S": "0"}  # a look every prompt, as many writes as can land
    lines = Lines(started("run", "--headless", "--profile", tiny_profile(tmp_path), *flags, env=env))
    proc = lines.proc
    wait_until(lambda: proc.poll() is not None or (log.exists() and log.stat().st_size >= 4000), "decoding has begun")
    in_place, read_before = 0, len(lines.reloads)
    while proc.poll() is None and len(lines.reloads) < read_before + 10:  # each read logs one reload line
        path.write_bytes(_mutate(rng, _random_policy(rng)))
        in_place += 1
    marker = QUICK.encode() + f"# fuzz marker {rng.random()}\n".encode()
    marker_sha = _expected(marker, scratch)
    _write(path, marker, 1)  # from its reload on, each reload is one awaited write
    synced = lines.wait(lambda reloads: any(f"(sha256 {marker_sha[:12]})" in line for line in reloads))
    expected = _awaited_writes(lines, path, rng, scratch) if synced else []
    proc.communicate(timeout=300)
    lines.thread.join(timeout=10)
    events = list(read_log(log))
    loads = [e for e in events if isinstance(e, PolicyLoaded)][1:]
    refused = [e for e in loads if not e.accepted]
    print(
        f"\nhot-reload fuzz: {in_place} in-place writes, then {len(expected)} awaited atomic writes "
        f"({sum(w is None for w in expected)} invalid, {sum(w is not None for w in expected)} valid); the run "
        f"logged {len(loads)} reloads: {len(loads) - len(refused)} taken, {len(refused)} refused; "
        f"exit {proc.returncode}"
    )
    stderr = "\n".join(lines.all)
    assert proc.returncode == 0 and "Traceback" not in stderr, stderr[-3000:]
    assert isinstance(events[-1], SessionFinished) and events[-1].reason == "done"
    assert sum(isinstance(e, RoundVerified) for e in events) == events[-1].rounds
    assert synced and len(expected) >= 30, "too few writes landed while the run went on to call this a fuzz"
    awaited = loads[max(i for i, e in enumerate(loads) if e.sha256 == marker_sha) + 1 :]
    assert len(awaited) == len(expected)  # each awaited write read exactly once...
    for ev, want in zip(awaited, expected):  # ...and judged as `policy check` judges it
        assert ev.accepted == (want is not None) and (not ev.accepted or ev.sha256 == want), ev.error
    assert all(LOCATED.match(e.error) and e.error.startswith(f"{path}:") for e in refused), [
        e.error for e in refused if not LOCATED.match(e.error)
    ][:3]
    assert len(lines.reloads) == len(loads)  # one stderr line per reload, taken or refused
    assert sum(line.startswith("specmon: policy edit refused") for line in lines.reloads) == len(refused)
