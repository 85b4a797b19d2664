"""specmon watch: reading /metrics pages (recorded from a real llama-server, written from vLLM's docs,
produced by specmon serve's own registry), the poll loop against a stand-in server, and the command."""

from pathlib import Path

import pytest

from specmon.events.schema import ServerScraped
from specmon.metrics import served
from specmon.watch.exposition import NotMetrics, kind_of, read, samples
from specmon.watch.scrape import client, scrape
from specmon.watch import lines
from specmon.watch.lines import clock
from specmon.watch.poll import Watcher
from upstream import FakeUpstream

FIXTURES = Path(__file__).parent / "fixtures" / "metrics"


def page(name: str) -> str:
    return (FIXTURES / name).read_text()


def detect_kind(text: str) -> str | None:
    """Whose /metrics this is, from its names: "llama-server", "vllm", "specmon", or None."""
    try:
        return kind_of(samples(text))
    except NotMetrics:
        return None


def test_a_real_llama_server_page_before_and_after_three_self_drafted_requests():
    assert detect_kind(page("llama-server-before.txt")) == "llama-server"
    before = read(samples(page("llama-server-before.txt")), "llama-server")
    assert (before.drafts, before.draft_tokens, before.accepted, before.accepted_per_pos) == (0, 0, 0, [])
    after = read(samples(page("llama-server-after.txt")), "llama-server")
    assert (after.drafts, after.draft_tokens, after.accepted) == (9, 36, 36)
    assert after.accepted_per_pos == [9, 9, 9, 9]  # sized by the draft max (4), filled in once drafts came
    assert (after.generation_tokens, after.running, after.waiting) == (48, 0, 0)


def test_vllm_counters_are_summed_over_engines_and_models_but_not_positions():
    text = page("vllm.txt")
    assert detect_kind(text) == "vllm"
    r = read(samples(text), "vllm")
    assert (r.drafts, r.draft_tokens, r.accepted) == (2800, 8400, 5000)  # _created samples are not counts
    assert r.accepted_per_pos == [2200, 1700, 1100]
    assert (r.generation_tokens, r.running, r.waiting) == (10000, 3, 4)


def test_specmon_serves_own_registry_is_read_summed_over_class_and_k():
    from prometheus_client import generate_latest

    from specmon.server.metrics import ServerMetrics

    m = ServerMetrics()
    for cls, k, drafts, tokens, accepted, per_pos in (
        ("code", "4", 10, 40, 22, [9, 7, 4, 2]),
        ("chat", "2", 5, 10, 3, [2, 1]),
    ):
        m.drafts.labels(cls, k).inc(drafts)
        m.draft_tokens.labels(cls, k).inc(tokens)
        m.verified_accepted.labels(cls, k).inc(accepted)  # what the target accepted: the figure a watch reads
        m.accepted.labels(cls, k).inc(accepted - 1)  # what was sent, less a stop string's cut: not read
        for pos, n in enumerate(per_pos):
            m.per_pos.labels(cls, k, str(pos)).inc(n)
    m.generation_tokens.inc(77)
    m.running.set(1)
    m.queue_depth.set(3)
    text = generate_latest(m.registry).decode()
    assert detect_kind(text) == "specmon"
    r = read(samples(text), "specmon")
    assert (r.drafts, r.draft_tokens, r.accepted, r.accepted_per_pos) == (15, 50, 25, [11, 8, 4, 2])
    assert (r.generation_tokens, r.running, r.waiting) == (77, 1, 3)


def test_the_recorded_specmon_page_reads_as_the_registry_wrote_it():
    r = read(samples(page("specmon.txt")), detect_kind(page("specmon.txt")))
    assert (r.kind, r.drafts, r.draft_tokens, r.accepted, r.accepted_per_pos) == ("specmon", 15, 50, 25, [11, 8, 4, 2])


def test_pages_that_are_not_metrics_are_said_so():
    assert detect_kind("<!doctype html>\n<html><body>llama.cpp</body></html>\n") is None
    assert detect_kind("") is None
    assert detect_kind("# HELP up whether\n# TYPE up gauge\nup 1\n") is None  # Prometheus text, but no known names
    with pytest.raises(NotMetrics):
        samples("<html>\n<body>x</body>\n</html>\n")
    with pytest.raises(NotMetrics, match="is nan"):  # a count that is not a number is a failed read, not a crash
        read(samples("llamacpp:spec_decode_num_drafts_total NaN\n"), "llama-server")


# -- a stand-in server: a page we set, served over real HTTP -----------------------------------------------


def llama_page(drafts, tokens, accepted, per_pos, generated, running=0, waiting=0) -> str:
    """A llama-server page with these counters (names and layout as in llama-server-after.txt)."""
    text = "".join(
        f"# HELP llamacpp:{name} x\n# TYPE llamacpp:{name} {kind}\nllamacpp:{name} {value}\n"
        for name, kind, value in (
            ("tokens_predicted_total", "counter", generated),
            ("spec_decode_num_draft_tokens_total", "counter", tokens),
            ("spec_decode_num_accepted_tokens_total", "counter", accepted),
            ("spec_decode_num_drafts_total", "counter", drafts),
            ("requests_processing", "gauge", running),
            ("requests_deferred", "gauge", waiting),
        )
    )
    return text + "".join(
        f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {n}\n' for i, n in enumerate(per_pos)
    )


@pytest.fixture
def standin():
    with FakeUpstream() as server:
        yield server


def test_the_watcher_says_down_back_and_restarted_once_each_and_no_total_spans_the_restart(standin):
    published: list[ServerScraped] = []
    with client() as http_client:
        watcher = Watcher(http_client, standin.url, "auto", published.append)
        standin.metrics_text = llama_page(0, 0, 0, [], 0)
        said = watcher.step()
        assert said == [f"{clock(published[0].t)}  watching {standin.url} (llama-server)"]
        standin.metrics_text = llama_page(10, 40, 30, [9, 8, 7, 6], 50, running=1)
        [line] = watcher.step()
        assert "drafts 10  draft tokens 40  accepted 30  acceptance 0.75  accepted/draft 3.00" in line
        assert "pos 0.90 0.80 0.70 0.60" in line and line.endswith("running 1 waiting 0")
        standin.stop()
        assert watcher.step()[0].endswith(f"{standin.url}: down: connection refused")
        assert watcher.step() == []  # still down: said once
        standin.start()  # the same port, counters from zero: a restart
        standin.metrics_text = llama_page(2, 8, 4, [2, 1, 1, 0], 10)
        [back] = watcher.step()
        assert "is back, restarted" in back
        standin.metrics_text = llama_page(6, 24, 12, [5, 4, 2, 1], 30)
        assert "drafts 4  draft tokens 16  accepted 8" in watcher.step()[0]
    assert [bool(s.error) for s in published] == [False, False, True, True, False, False]
    total = served.total(published)
    # the first run from its first read (10), the restarted one from zero (6): 2 before its first read count
    assert (total.drafts, total.draft_tokens, total.accepted, total.accepted_per_pos) == (16, 64, 42, (14, 12, 9, 7))
    totals = lines.totals_line(watcher.runs, watcher.failed_reads)  # what the watch says at its end
    assert totals.startswith(f"total {clock(published[0].t)}")
    assert "(1 restart, 2 failed reads): drafts 16  draft tokens 64  accepted 42" in totals
    assert served.total_of_runs(watcher.runs) == total  # the kept first-and-last reads sum as every read does


def test_a_page_that_is_not_metrics_and_a_missing_key_are_one_line_each(standin):
    with client() as http_client:
        watcher = Watcher(http_client, standin.url, "auto", lambda ev: None)
        standin.metrics_text = "<!doctype html>\n<html><body>llama.cpp</body></html>\n"
        [line] = watcher.step()
        assert line.endswith(
            f"  {standin.url}/metrics is not a Prometheus /metrics page (invalid metric name:<!doctype html>)"
        )
        standin.metrics_status = 501
        assert "HTTP 501 from" in watcher.step()[0] and "only with --metrics" in watcher.last.error
        standin.metrics_status, standin.metrics_text = 200, llama_page(0, 0, 0, [], 0)
        assert "is back (llama-server)" in watcher.step()[0]
    standin.api_key = "sekret"
    with client() as http_client:
        assert "--api-key-file" in Watcher(http_client, standin.url, "auto", lambda ev: None).step()[0]
    with client("sekret") as http_client:
        assert "watching" in Watcher(http_client, standin.url, "auto", lambda ev: None).step()[0]


def test_a_forced_kind_without_spec_counters_says_so(standin):
    standin.metrics_text = page("vllm.txt")
    with client() as http_client:
        ev = scrape(http_client, standin.url, "llama-server")
    assert ev.drafts is None and ev.error.endswith("has no speculative-decoding counters: is speculation on?")


@pytest.mark.parametrize(
    "content, mode, said",
    [
        ("secret\n", 0o644, "others can read it; run `chmod 600"),
        ("clé\n", 0o600, "expected one line of printable ASCII"),  # httpx cannot send it in a header
        (b"\xff\xfe", 0o600, "expected one line of printable ASCII"),  # not text at all
    ],
)
def test_a_key_file_mistake_is_one_line(tmp_path, content, mode, said):
    import subprocess
    import sys

    key = tmp_path / "key"
    key.write_bytes(content if isinstance(content, bytes) else content.encode())
    key.chmod(mode)
    args = [
        "watch",
        "--headless",
        "--api-key-file",
        str(key),
        "--log",
        str(tmp_path / "w.specmon"),
        "http://127.0.0.1:9",
    ]
    done = subprocess.run([sys.executable, "-m", "specmon.cli", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and said in done.stderr, done.stderr
    assert not (tmp_path / "w.specmon").exists()  # refused before a log was opened


def test_headless_lines_say_a_run_of_positions_at_n_a_once_and_wrap_to_the_terminal(standin, tmp_path):
    """The trial's headless watch of a llama-server with --draft-max 48 that had drafted nothing printed
    `pos N/A N/A …` 48 times: lines of 334-352 columns, the totals too. With COLUMNS=80 each fits, wrapped
    at its fields under a hanging indent."""
    import os
    import subprocess
    import sys

    standin.metrics_text = llama_page(0, 0, 0, [0] * 48, 12, running=1)
    args = ["watch", "--headless", "--duration", "1.5", "--log", str(tmp_path / "w.specmon"), standin.url]
    env = {**os.environ, "COLUMNS": "80"}
    done = subprocess.run(
        [sys.executable, "-m", "specmon.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and all(len(line) <= 80 for line in lines), done.stdout
    [total] = [i for i, line in enumerate(lines) if line.startswith("total ")]
    assert lines[total + 1 :] and all(line.startswith("  ") for line in lines[total + 1 :]), lines
    totals = " ".join(" ".join(lines[total:]).split())
    assert "acceptance N/A accepted/draft N/A pos 0-47: N/A 0.0 drafts/s" in totals and "N/A N/A" not in totals


def test_a_window_with_tokens_and_no_draft_fits_80_columns(standin):
    with client() as http_client:
        watcher = Watcher(http_client, standin.url, "auto", lambda ev: None)
        standin.metrics_text = llama_page(0, 0, 0, [0] * 48, 0)
        watcher.step()
        standin.metrics_text = llama_page(0, 0, 0, [0] * 48, 12)
        [line] = watcher.step()
    shown = lines.fitted(line, 80)
    assert len(shown) > 1 and all(len(part) <= 80 for part in shown), shown
    assert all(part.startswith("  ") for part in shown[1:]) and " ".join(shown).split() == line.split()
    assert "pos 0-47: N/A" in line and "N/A N/A" not in line
    assert lines.fitted(line, None) == [line]  # piped with no COLUMNS: one line for a reader


@pytest.mark.parametrize("columns", ["0", "1", "12"])
def test_a_width_too_narrow_to_wrap_leaves_each_line_whole(columns, monkeypatch, capsys):
    """COLUMNS=0 made `watch --headless` end in textwrap's ValueError (width 0): too narrow for a field a
    line, a line stays whole, as piped."""
    from specmon.watch.command import say

    line = lines.totals_line([], 2)
    monkeypatch.setenv("COLUMNS", columns)
    say(line)
    assert capsys.readouterr().out == line + "\n"
    assert lines.fitted(line, int(columns)) == [line]
