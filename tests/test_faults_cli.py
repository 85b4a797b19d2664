"""Fault tier, command line: bad flags, bad prompt and profile files, unwritable outputs, bad attach
addresses and Rich markup in user strings are each one line `specmon: ...`, never a traceback; a
value the prompt loader accepts is one the log's reader accepts back; the TCP token lives in a 0600
file and never on a command line.

`pytest tests/test_faults_cli.py -m slow -s` prints the CLI fuzz table (family: tried, clear, traceback,
hang, unclear)."""

import json
import os
import re
import signal
import stat
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specmon.backends import modelstore
from specmon.backends.profiles import load_profile
from specmon.cli.main import build_parser, main
from specmon.engine.prompts import load_prompts
from specmon.errors import SpecmonError
from specmon.events.schema import SessionFinished, decode, encode
from specmon.transport.attach import attach_events
from specmon.transport.channel import Channel, LogSink
from specmon.transport.serve import EventServer, parse_listen
from events import prompt_started, session_started
import specmoncli
from tinymodel import tiny_profile, write_tiny_gguf

REPO = Path(__file__).resolve().parent.parent
V1_LOG = REPO / "tests" / "fixtures" / "session-v1.specmon"
HANG_S = 120
LOG = "<a new log>"  # in a fuzz case's arguments: replaced by a log path of its own


def environment(env: dict | None = None, unset: tuple = ()) -> dict:
    """This process's environment for a `specmon` subprocess: this checkout's code, no stray token."""
    merged = {k: v for k, v in os.environ.items() if k not in ("SPECMON_TOKEN", *unset)}
    return {**merged, "PYTHONPATH": str(REPO), **(env or {})}


def specmon(*args: str, timeout: float = 300):
    """`specmon ARGS` run to its end in this file's environment: this checkout's code, no stray token."""
    return specmoncli.specmon(*args, env=environment(), timeout=timeout)


# Rich's last frame, and the progress lines printed instead of a bar when stderr is piped
PROGRESS_FRAME = re.compile(r"━| \d+/\d+ +(-:--:--|\d+:\d\d:\d\d)$|: \d+ of \d+ done( \(\d+ s\))?$")


ANNOUNCEMENTS = ("specmon: logging to", "specmon: serving on", "specmon: timing the engine")  # may wrap right after


def error_line(stderr: str) -> str | None:
    """The one error message, its indented continuation lines (wrapped where COLUMNS asks) joined to it,
    once the session's announcements (with theirs) and a progress bar's last frame are set aside; None
    if not exactly one message, or not `specmon: ...`."""
    lines, announcing = [], False
    for line in stderr.splitlines():
        announcing = line.startswith(ANNOUNCEMENTS) or (announcing and line.startswith("  "))
        if line.strip() and not announcing and not PROGRESS_FRAME.search(line):
            if line.startswith("  ") and lines:  # a message wrapped at COLUMNS goes on indented
                lines[-1] += " " + line.strip()
            else:
                lines.append(line)
    return lines[0] if len(lines) == 1 and lines[0].startswith("specmon: ") else None


def jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def blocked_dir(tmp: Path) -> Path:
    """A folder nothing can be created in: read-only for a normal user; for root (who ignores mode
    bits), a path through a regular file."""
    if os.geteuid() != 0:
        folder = tmp / "read-only"
        folder.mkdir()
        folder.chmod(0o500)
        return folder
    (tmp / "a-file").write_text("not a folder\n")
    return tmp / "a-file" / "sub"


def gguf_with_context(path: Path, context: int, monkeypatch) -> Path:
    """The tiny model, also declaring the context length it was 'trained' for."""

    class WithContext(gguf.GGUFWriter):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.add_uint32("llama.context_length", context)

    with monkeypatch.context() as patch:
        patch.setattr(gguf, "GGUFWriter", WithContext)
        return write_tiny_gguf(path)


# --- #5: what the prompt loader accepts, the log's reader accepts back --------------------------

JSON_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ident=JSON_VALUES, prompt_class=JSON_VALUES, limit=JSON_VALUES, text=st.text(max_size=20))
def test_a_prompt_row_the_loader_accepts_is_one_the_log_reader_accepts(tmp_path, ident, prompt_class, limit, text):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"id": ident, "prompt": text, "class": prompt_class, "max_new_tokens": limit}) + "\n")
    try:
        [prompt] = load_prompts(path)
    except SpecmonError as exc:
        assert str(exc).startswith(f"prompts file {path}, line 1: ")
        return
    started = prompt_started(
        prompt_id=prompt.id,
        prompt_class=prompt.prompt_class,
        draft_len=4,
        prompt_tokens=3,
        max_new_tokens=prompt.max_new_tokens or 32,
    )
    assert decode(encode(started)) == started  # the writer wrote what its own reader takes back
    assert (prompt.id, prompt.prompt_class, prompt.max_new_tokens) == (ident, prompt_class, limit)


def test_max_new_tokens_true_and_non_string_ids_are_refused_with_file_and_line(tmp_path):
    rows = [
        {"id": "a", "prompt": "hi"},
        {"id": "b", "prompt": "hi", "max_new_tokens": True},
        {"id": 7, "prompt": "hi"},
        {"id": "c", "prompt": "hi", "class": 3},
    ]
    with pytest.raises(SpecmonError) as refused:
        load_prompts(jsonl(tmp_path / "p.jsonl", rows))
    message = str(refused.value)
    where = f"prompts file {tmp_path / 'p.jsonl'}"
    assert message.startswith(f"{where}, line 2: max_new_tokens: expected `int | null`, got `bool`")
    assert "line 3: id: expected `str`, got `int`" in message and "line 4: class: expected `str`, got `int`" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    "data, fragment",
    [
        (b'{"id": "a", "prompt": "hi"}\n{"id": "b", "prompt": "caf\xe9"}\n', "line 2: not UTF-8 text"),
        (b'{"id": "a", "prompt": "x \\ud800 y"}\n', "line 1: a lone UTF-16 surrogate escape"),
        (b'{"id": "a", "prompt": "\\udc00"}\n', "line 1: a lone UTF-16 surrogate escape"),
        (b'{"id": "", "prompt": "hi"}\n', "line 1: id: expected `str` of length >= 1"),
        (b'{"id": "a", "prompt": "hi", "max_new_tokens": 0}\n', "line 1: max_new_tokens: expected `int` >= 1"),
        (b'{"id": "a", "prompt": "hi"}\n\n{"id": "a", "prompt": "yo"}\n', "line 3: id 'a' is used again (line 1)"),
    ],
)
def test_a_bad_prompt_file_is_one_error_naming_the_line(tmp_path, data, fragment):
    path = tmp_path / "p.jsonl"
    path.write_bytes(data)
    with pytest.raises(SpecmonError, match=re.escape(fragment)):
        load_prompts(path)


def test_a_byte_order_mark_and_a_surrogate_pair_are_text(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": "a", "prompt": "smile \\ud83d\\ude00"}\n')
    [prompt] = load_prompts(path)
    assert (prompt.id, prompt.text) == ("a", "smile \U0001f600")


def test_classes_filter_the_prompts_file_and_name_the_ones_it_has(tmp_path):
    from specmon.engine.prompts import prompt_set

    path = jsonl(
        tmp_path / "p.jsonl",
        [
            {"id": "1", "prompt": "a", "class": "chat"},
            {"id": "2", "prompt": "b", "class": "code"},
            {"id": "3", "prompt": "c"},
        ],
    )
    assert [p.id for p in prompt_set(path, "code, default")] == ["2", "3"]
    with pytest.raises(SpecmonError, match="has no class 'rewrite'; its classes: chat, code, default"):
        prompt_set(path, "chat,rewrite")


def test_run_with_classes_and_a_prompts_file_decodes_only_those_classes(tmp_path):
    prompts = jsonl(
        tmp_path / "p.jsonl",
        [{"id": "1", "prompt": "hello", "class": "chat"}, {"id": "2", "prompt": "def f():", "class": "code"}],
    )
    out = tmp_path / "out.json"
    done = specmon(
        "run",
        "--headless",
        "--profile",
        str(tiny_profile(tmp_path, max_new_tokens=8)),
        "--prompts",
        str(prompts),
        "--classes",
        "code",
        "--json",
        str(out),
        "--log",
        str(tmp_path / "x.specmon"),
    )
    assert done.returncode == 0, done.stderr
    assert list(json.loads(out.read_text())["classes"]) == ["code"]


# --- #10, #11, #12: profiles checked at the boundary, blamed on the right place ----------------

PROFILE_HEAD = 'name = "t"\n[target]\nmodel = "smollm2-135m-instruct"\n'


BAD_PROFILES = {  # name: (profile text, what the one error line says)
    "device": ('device = "banana"\n' + PROFILE_HEAD, "line 1: device: 'banana' is not a device"),
    "ngram-sizes": (
        PROFILE_HEAD + "[drafter]\nngram_sizes = [0, -1]\n",
        "line 5: drafter.ngram_sizes[0]: expected `int` >= 1",
    ),
    "no-ngram-sizes": (
        PROFILE_HEAD + "[drafter]\nngram_sizes = []\n",
        "line 5: drafter.ngram_sizes: expected `array` of length >= 1",
    ),
    "top-k": (PROFILE_HEAD + "[sampling]\ntop_k = -3\n", "line 5: sampling.top_k: expected `int` >= 0"),
    "temperature": (
        PROFILE_HEAD + "[sampling]\ntemperature = nan\n",
        "line 5: sampling.temperature: must be a finite number",
    ),
    "seed": (PROFILE_HEAD + "[sampling]\nseed = 1000000000000000000000000000000\n", "sampling.seed: expected `int` <="),
    "max-new-tokens": ("max_new_tokens = -4\n" + PROFILE_HEAD, "line 1: max_new_tokens: expected `int` >= 1"),
    "layers": (PROFILE_HEAD + "[drafter]\nlayers = 0\n", "line 5: drafter.layers: expected `int` >= 1"),
    "deeply-nested": ("x = " + "[" * 50_000 + "]" * 50_000 + "\n", "invalid TOML"),
}


@pytest.mark.parametrize("name", BAD_PROFILES)
def test_a_bad_profile_value_is_one_error_naming_the_key_and_line(tmp_path, name):
    body, fragment = BAD_PROFILES[name]
    path = tmp_path / "p.toml"
    path.write_text(body)
    with pytest.raises(SpecmonError, match=re.escape(fragment)) as refused:
        load_profile(str(path))
    assert str(path) in str(refused.value) and "--top-k" not in str(refused.value)


def test_a_profile_with_a_bom_loads_and_one_not_utf8_is_one_line(tmp_path):
    path = tmp_path / "p.toml"
    path.write_bytes(b"\xef\xbb\xbf" + PROFILE_HEAD.encode())
    assert load_profile(str(path)).name == "t"
    path.write_bytes(PROFILE_HEAD.encode() + b"# caf\xe9\n")
    with pytest.raises(SpecmonError, match=re.escape(f"profile {path}, line 4: not UTF-8 text")):
        load_profile(str(path))


def _args(**flags):
    return build_parser().parse_args(["run", *[part for k, v in flags.items() for part in (k, v)]])


def test_layers_out_of_range_is_blamed_on_the_flag_or_on_the_profile(tmp_path):
    from specmon.backends.loader import load_pair
    from specmon.backends.profiles import overrides

    profile = load_profile(str(tiny_profile(tmp_path, kind="layerskip", layers=1)))  # the tiny model has 2 layers
    _, spec = overrides(_args(**{"--layers": "3"}), profile)
    with pytest.raises(SpecmonError) as flag:
        load_pair(profile, spec)
    assert str(flag.value).startswith("--layers = 3, but a layer-skip draft") and "1..1" in str(flag.value)
    profile = load_profile(str(tiny_profile(tmp_path, kind="layerskip", layers=3)))
    with pytest.raises(SpecmonError, match=re.escape(f"profile {profile.source}: drafter.layers = 3")):
        load_pair(profile)


def test_drafter_model_without_a_draft_model_in_the_profile_is_one_line(tmp_path):
    from specmon.backends.profiles import overrides

    profile = load_profile(str(tiny_profile(tmp_path)))
    with pytest.raises(SpecmonError, match="--drafter model: profile .* names no draft model"):
        overrides(_args(**{"--drafter": "model"}), profile)


def test_max_seq_len_above_the_models_own_context_is_refused_with_its_limit(tmp_path, monkeypatch):
    from specmon.backends.loader import load_pair

    model = gguf_with_context(tmp_path / "ctx64.gguf", 64, monkeypatch)
    path = tmp_path / "p.toml"
    path.write_text(f'name = "t"\nmax_seq_len = 65\n[target]\npath = "{model}"\n')
    with pytest.raises(SpecmonError, match="max_seq_len = 65, but ctx64.gguf was trained for 64 tokens"):
        load_pair(load_profile(str(path)))
    path.write_text(f'name = "t"\nmax_seq_len = 64\n[target]\npath = "{model}"\n')
    assert load_pair(load_profile(str(path))).target.name == str(model)


# --- #12: flags refused when parsed, in one line naming the flag -------------------------------


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["run", "--temperature", "nan"], "argument --temperature: must be a finite number >= 0, not nan"),
        (["run", "--temperature", "inf"], "argument --temperature: must be a finite number >= 0, not inf"),
        (["run", "--max-new-tokens", "-5"], "argument --max-new-tokens: must be >= 1, not -5"),
        (["run", "--max-new-tokens", "0"], "argument --max-new-tokens: must be >= 1, not 0"),
        (["run", "--layers", "0"], "argument --layers: must be >= 1, not 0"),
        (["run", "--layers", "-3"], "argument --layers: must be >= 1, not -3"),
        (["run", "--top-k", "-3"], "argument --top-k: must be >= 0, not -3"),
        (["run", "--top-p", "0"], "argument --top-p: must be a finite number > 0 and <= 1, not 0"),
        (["run", "--seed", str(10**30)], "argument --seed: must be 0..9223372036854775807"),
        (["run", "-k", "65"], "argument -k/--draft-len: must be 0..64, not 65"),
        (["sweep", "--max-new-tokens", "0"], "argument --max-new-tokens: must be >= 1, not 0"),
        (["bench", "policy", "--repeat", "0"], "argument --repeat: must be >= 1, not 0"),
        (["replay", "x.specmon", "--speed", "nan"], "argument --speed: must be a finite number >= 0, not nan"),
    ],
)
def test_a_bad_flag_is_one_line_naming_it(capsys, argv, fragment):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("specmon: ") and fragment in lines[0], lines


# --- #11, #10: addresses ----------------------------------------------------------------------


def test_listen_resolves_names_and_checks_the_port():
    host, port = parse_listen("localhost:7777")
    assert port == 7777 and host in ("127.0.0.1", "::1")
    with pytest.raises(SpecmonError, match="port 0..65535"):
        parse_listen("127.0.0.1:99999")
    with pytest.raises(SpecmonError, match="only loopback"):
        parse_listen("0.0.0.0:7000")


@pytest.mark.parametrize("target", ["127.0.0.1:99999", "foo:bar", "127.0.0.1:0"])
def test_attach_to_a_bad_address_is_one_line(target):
    with pytest.raises(SpecmonError, match=re.escape(f"attach {target}: no such socket or log, and not HOST:PORT")):
        list(attach_events(target, "some-token"))


# --- #6: the token in a 0600 file, read by attach from --token-file or SPECMON_TOKEN ------------


def _served_session(tmp_path):
    sink = LogSink(tmp_path / "s.specmon")
    channel = Channel(sink)
    server = EventServer(sink, tmp_path / "s.sock", parse_listen("127.0.0.1:0"))
    channel.publish(session_started(specmon_version="x", profile_name="[/]"))
    channel.publish(SessionFinished(session_id="s", t=1.0, rounds=0, reason="done"))
    return channel, server


def test_the_token_is_in_a_0600_file_and_attach_reads_it_from_file_or_environment(tmp_path, capsys, monkeypatch):
    channel, server = _served_session(tmp_path)
    host, port = server.tcp_address
    try:
        assert stat.S_IMODE(os.stat(server.token_path).st_mode) == 0o600
        assert server.token_path.read_text().strip() == server.token
        assert main(["attach", f"{host}:{port}", "--headless", "--token-file", str(server.token_path)]) == 0
        assert "session finished (done)" in capsys.readouterr().out
        monkeypatch.setenv("SPECMON_TOKEN", server.token)
        assert main(["attach", f"{host}:{port}", "--headless"]) == 0
        assert "session s:" in capsys.readouterr().out
        monkeypatch.delenv("SPECMON_TOKEN")
        assert main(["attach", f"{host}:{port}", "--headless"]) == 2
        assert capsys.readouterr().err.startswith("specmon: attaching over TCP needs the session's token: --token-file")
        assert main(["attach", f"{host}:{port}", "--headless", "--token", server.token]) == 2
        assert capsys.readouterr().err.startswith(
            "specmon: --token was removed: any local user can read a command line"
        )
    finally:
        channel.close()
        server.close()
    assert not server.token_path.exists()


def test_run_listen_prints_the_token_file_never_the_token(tmp_path):
    prompts = jsonl(tmp_path / "p.jsonl", [{"id": str(n), "prompt": f"count to {n}"} for n in range(4)])
    profile = tiny_profile(tmp_path, max_new_tokens=200)
    flags = ["--prompts", prompts, "--listen", "127.0.0.1:0", "--log", tmp_path / "x.specmon"]
    run = specmoncli.started("run", "--headless", "--profile", profile, *flags, env=environment())
    try:
        seen = []
        # the line wraps at 80 columns: the flag and its path may be a line apart
        while not (said := re.search(r"--token-file\s+(\S+\.token)", "".join(seen))):
            line = run.stderr.readline()
            assert line, "the run ended before it said where it serves: " + "".join(seen)
            seen.append(line)
        run.send_signal(signal.SIGSTOP)  # the session (and its token file) stays while we look
        token_file = Path(said.group(1))
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        token = token_file.read_text().strip()
        assert re.fullmatch(r"[0-9a-f]{32}", token)
        run.send_signal(signal.SIGCONT)
        stdout, stderr = run.communicate(timeout=300)
    finally:
        run.kill() if run.poll() is None else None
    assert run.returncode == 0, stderr
    assert token not in "".join(seen) + stderr + stdout
    assert not token_file.exists()  # removed with the socket


# --- #7: user strings are text, not Rich markup ------------------------------------------------


def test_markup_in_class_names_profile_names_and_paths_prints_as_text(tmp_path):
    profile = tiny_profile(tmp_path, max_new_tokens=8)
    profile.write_text(profile.read_text().replace('name = "tiny"', 'name = "[bold]tiny[/]"'))
    prompts = jsonl(
        tmp_path / "p.jsonl",
        [{"id": "[/]", "prompt": "hello", "class": "[/]"}, {"id": "x", "prompt": "def f():", "class": "[red]code$|"}],
    )
    log = tmp_path / "[/]" / "s.specmon"
    done = specmon("run", "--headless", "--profile", str(profile), "--prompts", str(prompts), "--log", str(log))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "\n[/] " in done.stdout and "[red]code$|" in done.stdout and "[bold]tiny[/]" in done.stdout
    info = specmon("log", "info", str(log))
    assert info.returncode == 0 and "\n[/] " in info.stdout, info.stderr
    replay = specmon("replay", str(log), "--headless")
    assert replay.returncode == 0 and "\n[/] " in replay.stdout, replay.stderr
    report = specmon("report", str(log), "--out", str(tmp_path / "[r]"))
    assert report.returncode == 0 and str(tmp_path / "[r]" / "report.md") in report.stdout, report.stderr
    page = (tmp_path / "[r]" / "report.md").read_text()
    assert "| [/] |" in page and r"| [red]code$\| |" in page


# --- #11, #10: models and unwritable outputs ----------------------------------------------------


def test_models_list_says_damaged_for_a_file_whose_sha256_is_wrong(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPECMON_CACHE", str(tmp_path))
    cached = modelstore.cached_path(modelstore.SMOLLM2)
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"GGUF and then nothing much")
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert f"{cached}: damaged, sha256 mismatch (specmon models pull smollm2-135m-instruct)" in out
    assert "not pulled" not in out


def test_unwritable_report_folder_and_model_cache_are_one_line(tmp_path, monkeypatch, capsys):
    blocked = blocked_dir(tmp_path)
    assert main(["report", str(V1_LOG), "--out", str(blocked / "r")]) == 2
    assert capsys.readouterr().err.startswith("specmon: report: cannot write ")
    for name in ("SPECMON_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(blocked))
    assert main(["models", "pull"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specmon: cannot pull smollm2-135m-instruct: ") and err.count("\n") == 1


# --- the CLI fuzz: families of bad arguments and files, each one clear line ----------------------


@dataclass
class Case:
    family: str
    args: list[str]
    valid: bool = False  # the input is fine: exit 0
    expect: str = ""  # a fragment the error line must hold
    env: dict = field(default_factory=dict)
    unset: tuple = ()  # environment variables the command runs without
    cwd: Path | None = None


@dataclass
class Outcome:
    case: Case
    verdict: str  # clear, traceback, hang, unclear
    detail: str = ""


def _fuzz_files(tmp: Path, monkeypatch) -> dict[str, Path]:
    files = {"profile": tiny_profile(tmp, max_new_tokens=8), "blocked": blocked_dir(tmp)}
    files["prompts"] = jsonl(
        tmp / "ok.jsonl",
        [{"id": "a", "prompt": "hello", "class": "chat"}, {"id": "b", "prompt": "def f():", "class": "code"}],
    )
    model = files["profile"].parent / "tiny.gguf"
    files["ctx_model"] = gguf_with_context(tmp / "ctx64.gguf", 64, monkeypatch)
    (tmp / "folder").mkdir()
    (tmp / "cwd-logs-file").mkdir()
    (tmp / "cwd-logs-file" / "logs").write_text("a file where the logs folder goes\n")
    files["model"] = model
    return files


def _prompt_cases(tmp: Path, run: list[str]) -> list[Case]:
    """`run` is the command up to its --prompts."""
    bad_rows = {
        "not-utf8": b'{"id": "a", "prompt": "caf\xe9"}\n',
        "surrogate": b'{"id": "a", "prompt": "\\ud800"}\n',
        "low-surrogate": b'{"id": "a", "prompt": "x\\udfff"}\n',
        "mnt-true": b'{"id": "a", "prompt": "hi", "max_new_tokens": true}\n',
        "mnt-zero": b'{"id": "a", "prompt": "hi", "max_new_tokens": 0}\n',
        "mnt-negative": b'{"id": "a", "prompt": "hi", "max_new_tokens": -1}\n',
        "mnt-float": b'{"id": "a", "prompt": "hi", "max_new_tokens": 1.5}\n',
        "mnt-string": b'{"id": "a", "prompt": "hi", "max_new_tokens": "5"}\n',
        "mnt-huge": b'{"id": "a", "prompt": "hi", "max_new_tokens": 1000000000000000000000000000000}\n',
        "id-int": b'{"id": 1, "prompt": "hi"}\n',
        "id-missing": b'{"prompt": "hi"}\n',
        "id-empty": b'{"id": "", "prompt": "hi"}\n',
        "id-null": b'{"id": null, "prompt": "hi"}\n',
        "class-int": b'{"id": "a", "prompt": "hi", "class": 3}\n',
        "class-empty": b'{"id": "a", "prompt": "hi", "class": ""}\n',
        "class-list": b'{"id": "a", "prompt": "hi", "class": ["x"]}\n',
        "prompt-missing": b'{"id": "a"}\n',
        "prompt-int": b'{"id": "a", "prompt": 5}\n',
        "not-json": b'{"id": "a", "prompt": "hi"\n',
        "array": b'["a", "hi"]\n',
        "empty": b"",
        "blank-lines": b"\n  \n\n",
        "nul-bytes": b"\x00\x00\x00\n",
    }
    cases = []
    for name, data in bad_rows.items():
        (tmp / f"{name}.jsonl").write_bytes(data)
        cases.append(Case("prompt files", [*run, "--prompts", str(tmp / f"{name}.jsonl")], expect="prompts file"))
    good_rows = {
        "bom": b'\xef\xbb\xbf{"id": "a", "prompt": "hello"}\n',
        "markup-class": b'{"id": "[/]", "prompt": "hello", "class": "[/]"}\n{"id": "b", "prompt": "x", "class": "[bold"}\n',
        "unicode": '{"id": "é", "prompt": "日本語 \\ud83d\\ude00", "class": "ñ"}\n'.encode(),
        "extra-keys": b'{"id": "a", "prompt": "hi", "expected": "hello", "max_new_tokens": 4}\n',
    }
    for name, data in good_rows.items():
        (tmp / f"{name}.jsonl").write_bytes(data)
        cases.append(Case("prompt files", [*run, "--prompts", str(tmp / f"{name}.jsonl")], valid=True))
    cases += [
        Case("prompt files", [*run, "--prompts", str(tmp / "folder")], expect="cannot read"),
        Case("prompt files", [*run, "--prompts", str(tmp / "missing.jsonl")], expect="cannot read"),
        Case("prompt files", [*run, "--prompts", str(tmp / "ok.jsonl"), "--classes", "code"], valid=True),
        Case(
            "prompt files",
            [*run, "--prompts", str(tmp / "ok.jsonl"), "--classes", "rewrite"],
            expect="has no class 'rewrite'",
        ),
    ]
    return cases


def _profile_cases(tmp: Path, files: dict[str, Path]) -> list[Case]:
    target = f'[target]\npath = "{files["model"]}"\n'
    bodies = {
        "device-banana": ('name = "t"\ndevice = "banana"\n' + target, "device"),
        "device-cuda-x": ('name = "t"\ndevice = "cuda:x"\n' + target, "device"),
        "ngram-zero-negative": ('name = "t"\n' + target + "[drafter]\nngram_sizes = [0, -1]\n", "ngram_sizes"),
        "ngram-empty": ('name = "t"\n' + target + "[drafter]\nngram_sizes = []\n", "ngram_sizes"),
        "ngram-huge": (
            'name = "t"\n' + target + "[drafter]\nngram_sizes = [1000000000000000000000000]\n",
            "ngram_sizes",
        ),
        "top-k-negative": ('name = "t"\n' + target + "[sampling]\ntop_k = -3\n", "sampling.top_k"),
        "temperature-nan": ('name = "t"\n' + target + "[sampling]\ntemperature = nan\n", "sampling.temperature"),
        "temperature-inf": ('name = "t"\n' + target + "[sampling]\ntemperature = inf\n", "sampling.temperature"),
        "top-p-zero": ('name = "t"\n' + target + "[sampling]\ntop_p = 0.0\n", "sampling.top_p"),
        "seed-negative": ('name = "t"\n' + target + "[sampling]\nseed = -1\ntemperature = 0.8\n", "sampling.seed"),
        "seed-huge": (
            'name = "t"\n' + target + "[sampling]\nseed = 1000000000000000000000\ntemperature = 0.8\n",
            "sampling.seed",
        ),
        "max-new-tokens-negative": ('name = "t"\nmax_new_tokens = -4\n' + target, "max_new_tokens"),
        "max-seq-len-zero": ('name = "t"\nmax_seq_len = 0\n' + target, "max_seq_len"),
        "max-seq-len-above-context": (
            f'name = "t"\nmax_seq_len = 4096\n[target]\npath = "{files["ctx_model"]}"\n',
            "trained for 64 tokens",
        ),
        "layers-zero": ('name = "t"\n' + target + '[drafter]\nkind = "layerskip"\nlayers = 0\n', "drafter.layers"),
        "layers-too-many": ('name = "t"\n' + target + '[drafter]\nkind = "layerskip"\nlayers = 9\n', "drafter.layers"),
        "draft-len-99": ('name = "t"\n' + target + "[drafter]\ndraft_len = 99\n", "draft_len"),
        "pad-from-one": ('name = "t"\npad_from = 1\n' + target, "pad_from"),
        "pad-from-five": ('name = "t"\npad_from = 5\n' + target, "pad_from"),
        "kind-model-no-target": ('name = "t"\n' + target + '[drafter]\nkind = "model"\n', "drafter.target"),
        "exl2-on-cpu": ('name = "t"\nbackend = "exllamav2"\n' + target, "exllamav2"),
        "unknown-key": ('name = "t"\nnmae = "x"\n' + target, "nmae"),
        "invalid-toml": ('name = "t\n' + target, "invalid TOML"),
        "deeply-nested": ("x = " + "[" * 50_000 + "]" * 50_000 + "\n", "invalid TOML"),
        "no-target": ('name = "t"\n', "target"),
        "missing-model": ('name = "t"\n[target]\npath = "nope.gguf"\n', "does not exist"),
        "model-not-gguf": (f'name = "t"\n[target]\npath = "{files["prompts"]}"\n', "not a readable GGUF"),
        "model-a-folder": (f'name = "t"\n[target]\npath = "{tmp / "folder"}"\n', "tokenizer.json"),
    }

    def run_profile(path: Path) -> list[str]:
        return ["run", "--headless", "--profile", str(path), "--prompts", str(files["prompts"]), "--log", LOG]

    cases = []
    for name, (body, fragment) in bodies.items():
        (tmp / f"{name}.toml").write_text(body)
        cases.append(
            Case(
                "profiles",
                run_profile(tmp / f"{name}.toml"),
                expect=fragment,
            )
        )
    (tmp / "not-utf8.toml").write_bytes(b'name = "caf\xe9"\n' + target.encode())
    (tmp / "bom.toml").write_bytes(b'\xef\xbb\xbfname = "t"\nmax_new_tokens = 8\n' + target.encode())
    (tmp / "markup-name.toml").write_text('name = "[/]"\nmax_new_tokens = 8\n' + target)
    for name, valid in (("not-utf8", False), ("bom", True), ("markup-name", True)):
        cases.append(
            Case(
                "profiles",
                run_profile(tmp / f"{name}.toml"),
                valid=valid,
                expect="" if valid else "not UTF-8",
            )
        )
    cases.append(Case("profiles", ["run", "--headless", "--profile", "no-such-profile"], expect="cannot read"))
    return cases


def _flag_cases(tmp: Path, run: list[str]) -> list[Case]:
    run = [*run, "--prompts", str(tmp / "ok.jsonl")]
    bad = [
        (["--temperature", "nan"], "--temperature"),
        (["--temperature", "inf"], "--temperature"),
        (["--temperature", "-1"], "--temperature"),
        (["--temperature", "abc"], "--temperature"),
        (["--top-p", "0"], "--top-p"),
        (["--top-p", "1.5"], "--top-p"),
        (["--top-p", "nan"], "--top-p"),
        (["--top-k", "-3"], "--top-k"),
        (["--seed", str(10**30), "--temperature", "0.8"], "--seed"),
        (["--seed", "-1"], "--seed"),
        (["--max-new-tokens", "-5"], "--max-new-tokens"),
        (["--max-new-tokens", "0"], "--max-new-tokens"),
        (["--max-new-tokens", str(10**30)], "--max-new-tokens"),
        (["--max-new-tokens", "100000"], "exceed the cache"),
        (["-k", "-1"], "--draft-len"),
        (["-k", "65"], "--draft-len"),
        (["-k", "x"], "--draft-len"),
        (["--layers", "0"], "--layers"),
        (["--layers", "-3"], "--layers"),
        (["--drafter", "layerskip", "--layers", "5"], "--layers"),
        (["--drafter", "model"], "--drafter model"),
        (["--drafter", "banana"], "--drafter"),
        (["--classes", ","], "--classes"),
        (["--listen", "0.0.0.0:7000"], "loopback"),
        (["--listen", "127.0.0.1:99999"], "--listen"),
        (["--listen", "127.0.0.1:abc"], "--listen"),
        (["--listen", "no-such-host.invalid:7000"], "--listen"),
        (["--policy", str(tmp / "missing.toml")], "missing.toml"),
        (["--policy", "default", "-k", "2"], "--policy"),
        (["--no-such-flag"], "unrecognized arguments"),
    ]
    cases = [Case("run flags", [*run, *flags], expect=fragment) for flags, fragment in bad]
    good = [
        ["--temperature", "0.8", "--seed", "7", "--top-k", "5", "--top-p", "0.9"],
        ["--listen", "localhost:0"],
        ["--drafter", "layerskip", "--layers", "1", "-k", "2"],
        ["--max-new-tokens", "1"],
        ["-k", "0"],
    ]
    cases += [Case("run flags", [*run, *flags], valid=True) for flags in good]
    return cases


def _output_cases(tmp: Path, files: dict[str, Path], run: list[str]) -> list[Case]:
    blocked = files["blocked"]
    run = [*run, "--prompts", str(files["prompts"])]
    bare_run = ["run", "--headless", "--profile", str(files["profile"]), "--prompts", str(files["prompts"])]
    home = {"HOME": str(blocked)}
    return [
        Case("output paths", [*bare_run, "--log", str(blocked / "x.specmon")], expect="cannot create the session log"),
        Case("output paths", bare_run, cwd=tmp / "cwd-logs-file", expect="session log"),
        Case("output paths", [*run, "--json", str(blocked / "out.json")], expect="--json"),
        Case("output paths", [*run, "--json", str(tmp / "folder")], expect="--json"),
        Case("output paths", ["report", str(V1_LOG), "--out", str(blocked / "r")], expect="report: cannot write"),
        Case("output paths", ["report", str(tmp / "missing.specmon")], expect="missing.specmon"),
        Case("output paths", ["log", "info", str(tmp / "missing.specmon")], expect="missing.specmon"),
        Case(
            "output paths",
            ["models", "pull"],
            env=home,
            unset=("SPECMON_CACHE", "XDG_CACHE_HOME"),
            expect="cannot pull",
        ),
        Case(
            "output paths",
            ["models", "export", "smollm2-135m-instruct", str(blocked / "m"), "--layers", "-1"],
            expect="--layers",
        ),
        Case("output paths", ["report", str(V1_LOG), "--out", str(tmp / "report-ok")], valid=True),
    ]


def _attach_cases(tmp: Path) -> list[Case]:
    token_env = {"SPECMON_TOKEN": "0" * 32}
    (tmp / "empty-token").write_text("")
    return [
        Case("attach", ["attach", "--headless", "127.0.0.1:99999"], env=token_env, expect="127.0.0.1:99999"),
        Case("attach", ["attach", "--headless", "foo:bar"], env=token_env, expect="foo:bar"),
        Case("attach", ["attach", "--headless", "[::1]:"], expect="[::1]:"),
        Case("attach", ["attach", "--headless", "127.0.0.1:1"], env=token_env, expect="cannot attach"),
        Case("attach", ["attach", "--headless", "no-such-host.invalid:7000"], env=token_env, expect="cannot attach"),
        Case("attach", ["attach", "--headless", "127.0.0.1:1"], expect="--token-file"),
        Case("attach", ["attach", "--headless", "127.0.0.1:1", "--token", "abc"], expect="--token was removed"),
        Case(
            "attach", ["attach", "--headless", "127.0.0.1:1", "--token-file", str(tmp / "none")], expect="--token-file"
        ),
        Case(
            "attach", ["attach", "--headless", "127.0.0.1:1", "--token-file", str(tmp / "empty-token")], expect="empty"
        ),
        Case("attach", ["attach", "--headless", str(tmp / "none.sock")], expect="cannot attach"),
        Case("attach", ["attach", "--headless", str(tmp / "none.specmon")], expect="none.specmon"),
        Case(
            "attach",
            ["attach", "--headless"],
            env={"XDG_RUNTIME_DIR": str(tmp / "folder")},
            expect="no running session",
        ),
    ]


def _grid_cases(tmp: Path, files: dict[str, Path]) -> list[Case]:
    sweep = [
        "sweep",
        "--profile",
        str(files["profile"]),
        "--prompts",
        str(files["prompts"]),
        "--log",
        LOG,
        "--out",
        str(tmp / "sweep-plots"),
    ]
    bench = ["bench", "policy", "--profile", str(files["profile"]), "--prompts", str(files["prompts"]), "--log", LOG]
    bad = [
        (sweep, ["--temperatures", "nan"]),
        (sweep, ["--top-ps", "inf"]),
        (sweep, ["--ks", "0-99"]),
        (sweep, ["--layers", "0"]),
        (sweep, ["--max-new-tokens", "0"]),
        (sweep, ["--drafters", "model"]),
        (sweep, ["--seed", "-1"]),
        (sweep, ["--classes", "rewrite"]),
        (bench, ["--repeat", "0"]),
        (bench, ["--layers", "0"]),
        (bench, ["--drafter", "model"]),
        (bench, ["--max-new-tokens", "-1"]),
        (bench, ["--fixed-passes", "-1"]),
        (bench, ["--json", str(files["blocked"] / "b.json")]),
        (bench, ["--ks", "x"]),
        (bench, ["--policy", str(files["prompts"])]),
    ]
    cases = [Case("sweep, bench", [*base, *flags]) for base, flags in bad]
    cases += [
        Case("sweep, bench", [*sweep, "--ks", "0-1", "--max-new-tokens", "4"], valid=True),
        Case("sweep, bench", [*bench, "--ks", "0,1", "--repeat", "1", "--max-new-tokens", "4"], valid=True),
    ]
    return cases


def _markup_cases(tmp: Path, files: dict[str, Path]) -> list[Case]:
    """Valid input with Rich markup in class names, ids, profile name and paths, through every reader."""
    folder = tmp / "[/]"  # two folders, "[" and "]": the path prints as .../[/]/...
    folder.mkdir(parents=True)
    prompts = jsonl(
        folder / "[b].jsonl",
        [{"id": "[/]", "prompt": "hello", "class": "[/]"}, {"id": "[red]", "prompt": "x", "class": "[bold"}],
    )
    log = folder / "made.specmon"
    specmon("run", "--headless", "--profile", str(files["profile"]), "--prompts", str(prompts), "--log", str(log))
    return [
        Case(
            "markup",
            [
                "run",
                "--headless",
                "--profile",
                str(files["profile"]),
                "--prompts",
                str(prompts),
                "--log",
                str(folder / "again.specmon"),
            ],
            valid=True,
        ),
        Case("markup", ["log", "info", str(log)], valid=True),
        Case("markup", ["replay", str(log), "--headless"], valid=True),
        Case("markup", ["replay", str(log), "--policy", "default"], valid=True),
        Case("markup", ["report", str(log), "--out", str(folder / "[r]")], valid=True),
        Case("markup", ["attach", "--headless", str(log)], valid=True),
        Case(
            "markup",
            [
                "sweep",
                "--profile",
                str(files["profile"]),
                "--prompts",
                str(prompts),
                "--ks",
                "0-1",
                "--max-new-tokens",
                "4",
                "--log",
                str(folder / "sweep.specmon"),
                "--out",
                str(folder / "[plots]"),
            ],
            valid=True,
        ),
    ]


def _try(case: Case, log: Path) -> Outcome:
    args = [str(log) if arg == LOG else arg for arg in case.args]
    try:
        done = specmoncli.specmon(*args, cwd=case.cwd, env=environment(case.env, case.unset), timeout=HANG_S)
    except subprocess.TimeoutExpired:
        return Outcome(case, "hang")
    if "Traceback" in done.stderr:
        return Outcome(case, "traceback", done.stderr.strip().splitlines()[-1])
    if case.valid:
        return Outcome(case, "clear" if done.returncode == 0 else "unclear", done.stderr.strip()[-300:])
    line = error_line(done.stderr)
    if done.returncode != 0 and line is not None and case.expect in line:
        return Outcome(case, "clear", line)
    return Outcome(case, "unclear", f"exit {done.returncode}: {done.stderr.strip()[-300:]}")


@pytest.mark.slow
def test_cli_fuzz_every_bad_input_is_one_clear_line(tmp_path, monkeypatch):
    files = _fuzz_files(tmp_path, monkeypatch)
    run = ["run", "--headless", "--profile", str(files["profile"]), "--log", LOG]
    cases = [
        *_flag_cases(tmp_path, run),
        *_prompt_cases(tmp_path, run),
        *_profile_cases(tmp_path, files),
        *_output_cases(tmp_path, files, run),
        *_attach_cases(tmp_path),
        *_grid_cases(tmp_path, files),
        *_markup_cases(tmp_path, files),
    ]
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        outcomes = list(pool.map(_try, cases, [tmp_path / "logs" / f"case-{n}.specmon" for n in range(len(cases))]))
    print(
        f"\nCLI fuzz: {len(cases)} commands in {time.monotonic() - started:.0f} s "
        f"(clear: a valid input exits 0; a bad one exits non-zero with one line `specmon: ...`)"
    )
    print(f"{'family':<14} {'tried':>5} {'clear':>5} {'traceback':>9} {'hang':>4} {'unclear':>7}")
    for family in dict.fromkeys(c.family for c in cases):
        mine = [o for o in outcomes if o.case.family == family]
        counts = [sum(o.verdict == v for o in mine) for v in ("clear", "traceback", "hang", "unclear")]
        print(f"{family:<14} {len(mine):>5} {counts[0]:>5} {counts[1]:>9} {counts[2]:>4} {counts[3]:>7}")
    failures = [
        f"{o.verdict}: specmon {' '.join(o.case.args)}\n    {o.detail}" for o in outcomes if o.verdict != "clear"
    ]
    assert not failures, f"{len(failures)} of {len(cases)}:\n" + "\n".join(failures)


def test_error_line_sets_announcements_aside():
    assert error_line("specmon: logging to x; watch with: y\nspecmon: boom\n") == "specmon: boom"
    assert error_line("specmon: logging to x; watch with:\n  specmon attach y\nspecmon: boom\n") == "specmon: boom"
    assert error_line("specmon: a\nspecmon: b\n") is None
    assert error_line("Traceback (most recent call last):\n") is None
    assert error_line("chat ━━━━━━━━━━ 3/20 0:00:01\nspecmon: too long\n") == "specmon: too long"
    assert error_line("ngram k=4 vs plain          0/2 -:--:--\nspecmon: too long\n") == "specmon: too long"
    assert error_line("specmon: too long\nsecond line of it\n") is None
    assert error_line("specmon: too long for\n  one line\n") == "specmon: too long for one line"  # wrapped at COLUMNS
    long_path = "specmon: logging to\n  /tmp/pytest-of-root/pytest-415/a_long_test_name_0/x.specmon;\n  watch with: y\n"
    assert error_line(long_path + "specmon: boom\n") == "specmon: boom"  # wrapped right after `logging to`
