"""specmon watch: reading /metrics pages (recorded from a real llama-server, written from vLLM's docs,
produced by specmon serve's own registry), the poll loop against a stand-in server, and the command."""

from pathlib import Path

import pytest

from specmon.watch import detect_kind, read, samples
from specmon.watch.exposition import NotMetrics

FIXTURES = Path(__file__).parent / "fixtures" / "metrics"


def page(name: str) -> str:
    return (FIXTURES / name).read_text()


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
        m.accepted.labels(cls, k).inc(accepted)
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
