"""The proxy's own /metrics (proxy.exported): per class, side and upstream, the same sums `log info`
reads from the log; where each class is routed; which upstreams are up; failovers; the upstream's own
page moved to /upstream/metrics; and `promtool check metrics` clean."""

from __future__ import annotations

import shutil
import subprocess
from collections import defaultdict

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_proxy import PATHS, POLICY, proxy, timed
from upstream import FIXTURES, FakeUpstream, request_body
from llama_server import free_port

from events import tally_of
from specmon.proxy.exported import upstream_label
from specmon.watch.scrape import client, scrape
from specmon.proxy.routing import PLAIN, SPEC

CLASSES = ("chat", "code-edit", "rewrite")


def samples(page: str) -> dict[str, list[tuple[dict, float]]]:
    """Sample name -> [(labels, value)], as Prometheus would read the page."""
    out: dict[str, list[tuple[dict, float]]] = defaultdict(list)
    for family in text_string_to_metric_families(page):
        for s in family.samples:
            out[s.name].append((s.labels, s.value))
    return out


def summed(found, name: str, by=("class", "side"), **where) -> dict[tuple, float]:
    """Σ of a sample over the other labels, keyed by `by`: what `sum by (...)` gives in PromQL."""
    out: dict[tuple, float] = defaultdict(float)
    for labels, value in found.get(name, []):
        if all(labels.get(k) == v for k, v in where.items()):
            out[tuple(labels[k] for k in by)] += value
    return dict(out)


def send(url: str, i: int) -> None:
    endpoint = ("chat", "completion")[i % 2]
    body = request_body(endpoint, stream=bool(i % 3))
    reply = httpx.post(url + PATHS[endpoint], json=body, headers={"X-Specmon-Class": CLASSES[i % 3]}, timeout=30)
    assert reply.status_code == 200


def test_the_proxys_metrics_are_the_logs_sums_per_class_and_side(tmp_path):
    log = tmp_path / "p.specmon"
    with FakeUpstream() as spec, FakeUpstream("-plain") as plain, proxy(log, spec.url, plain.url) as p:
        for i in range(24):
            send(p.url, i)
        page = httpx.get(p.url + "/metrics").text
        upstream_page = httpx.get(p.url + "/upstream/metrics").text
    found = samples(page)
    totals = tally_of(timed(log)).totals
    assert {key for key, t in totals.items() if t.requests} == {(c, s) for c in CLASSES for s in (SPEC, PLAIN)}
    drafted = summed(found, "specmon_spec_decode_num_draft_tokens_total")
    accepted = summed(found, "specmon_spec_decode_num_accepted_tokens_total")
    tokens = summed(found, "specmon_decode_tokens_total", clock="server")
    seconds = summed(found, "specmon_decode_seconds_total", clock="server")
    requests = summed(found, "specmon_proxy_requests_total", status="200")
    for key, t in totals.items():
        assert requests[key] == t.requests
        assert (drafted.get(key, 0), accepted.get(key, 0)) == (t.draft_n, t.draft_n_accepted)
        assert tokens[key] == t.predicted_n and seconds[key] == pytest.approx(t.predicted_ms / 1e3)
    assert sum(drafted.values()) > 0 and sum(accepted.values()) > 0  # the spec side's replies drafted
    upstreams = {labels["upstream"] for labels, _ in found["specmon_proxy_requests_total"]}
    assert upstreams == {spec.url, plain.url}
    routed = summed(found, "specmon_route_side", by=("class", "side"))
    for name in CLASSES:  # exactly one side per class is where it goes now
        assert sum(routed[(name, side)] for side in ("both", SPEC, PLAIN)) == 1
    assert sorted(summed(found, "specmon_upstream_up", by=("side", "upstream")).items()) == sorted(
        {(SPEC, spec.url): 1.0, (PLAIN, plain.url): 1.0}.items()
    )
    assert upstream_page == (FIXTURES.parent / "metrics" / spec.metrics_page).read_text()  # moved, not lost
    if shutil.which("promtool"):  # the package .ci/run installs; test_promtool says why where it is missing
        lint = subprocess.run(["promtool", "check", "metrics"], input=page, capture_output=True, text=True)
        assert lint.returncode == 0 and not lint.stdout.strip(), lint.stdout + lint.stderr


def test_a_failover_and_a_member_that_is_down_are_counted(tmp_path):
    log = tmp_path / "p.specmon"
    dead = f"http://127.0.0.1:{free_port()}"
    with FakeUpstream() as spec, proxy(log, spec.url, dead) as p:
        for i in range(6):  # half would alternate to plain, whose one member refuses
            send(p.url, i)
        found = samples(httpx.get(p.url + "/metrics").text)
    events = timed(log)
    moved = [ev for ev in events if ev.routed]
    assert moved and all((ev.routed, ev.upstream) == (PLAIN, SPEC) for ev in moved)
    assert sum(summed(found, "specmon_failovers_total", by=("routed", "side")).values()) == len(moved)
    up = summed(found, "specmon_upstream_up", by=("side", "upstream"))
    assert up == {(SPEC, spec.url): 1.0, (PLAIN, dead): 0.0}
    answered = summed(found, "specmon_proxy_requests_total", by=("side",), status="200")
    assert answered == {(SPEC,): 6.0, (PLAIN,): 0.0}  # the dead member's series is there, at 0


def test_every_series_a_class_and_member_can_have_is_there_at_zero_before_any_request(tmp_path):
    """So a rate sees each first count (a series that appears with its first request starts at 1)."""
    with (
        FakeUpstream() as spec,
        FakeUpstream("-plain") as plain,
        proxy(tmp_path / "p.specmon", spec.url, plain.url) as p,
    ):
        found = samples(httpx.get(p.url + "/metrics").text)
    names = {c.name for c in POLICY.classes}
    members = {(SPEC, spec.url), (PLAIN, plain.url)}
    for name in (
        "specmon_spec_decode_num_draft_tokens_total",
        "specmon_rounds_total",
        "specmon_generation_tokens_total",
    ):
        assert {(lb["class"], lb["side"], lb["upstream"]): v for lb, v in found[name]} == {
            (c, side, url): 0.0 for c in names for side, url in members
        }
    assert {(lb["class"], lb["status"]) for lb, _ in found["specmon_proxy_requests_total"]} == {
        (c, "200") for c in names
    }
    assert {(lb["class"], lb["routed"], lb["side"]) for lb, _ in found["specmon_failovers_total"]} == {
        (c, a, b) for c in names for a, b in ((SPEC, PLAIN), (PLAIN, SPEC))
    }
    counts = [v for name, series in found.items() if name.endswith("_total") for _, v in series]
    assert len(counts) >= 8 * len(names) * len(members) and set(counts) == {0.0}
    route = summed(found, "specmon_route_side", by=("class", "side"))
    assert {key for key, v in route.items() if v == 1} == {(c, "both") for c in names}  # nothing learnt yet
    assert "specmon_route_spec_over_plain" not in found  # no move, no estimate


def test_tokens_per_step_from_the_counters_is_log_infos(tmp_path):
    log = tmp_path / "p.specmon"
    with FakeUpstream() as spec, proxy(log, spec.url) as p:
        for i in range(9):
            send(p.url, i)
        found = samples(httpx.get(p.url + "/metrics").text)
    accepted = summed(found, "specmon_spec_decode_num_accepted_tokens_total")
    steps = summed(found, "specmon_rounds_total")
    for key, t in tally_of(timed(log)).totals.items():
        assert steps[key] > 0 and (accepted[key] + steps[key]) / steps[key] == pytest.approx(t.tokens_per_step)


def test_watch_pointed_at_a_proxy_reads_the_upstreams_page_behind_it(tmp_path):
    """The proxy's own page is per class and side: `specmon watch PROXY` reads /upstream/metrics, as it
    read /metrics before the proxy had a page of its own."""
    with FakeUpstream() as spec, proxy(tmp_path / "p.specmon", spec.url) as p, client() as http:
        through, direct = scrape(http, p.url), scrape(http, spec.url)
    assert (through.kind, through.error, through.url) == ("llama-server", direct.error, p.url)
    assert (through.drafts, through.draft_tokens, through.accepted) == (
        direct.drafts,
        direct.draft_tokens,
        direct.accepted,
    )


def test_refusals_are_counted_and_a_members_password_is_no_label(tmp_path):
    with FakeUpstream() as spec, proxy(tmp_path / "p.specmon", spec.url) as p:
        bad = httpx.post(p.url + PATHS["chat"], json=request_body("chat"), headers={"X-Specmon-Class": "no-such"})
        found = samples(httpx.get(p.url + "/metrics").text)
    assert bad.status_code == 400
    assert summed(found, "specmon_proxy_requests_refused_total", by=("status",)) == {("400",): 1.0}
    assert upstream_label("http://user:secret@gpu1:8080") == "http://gpu1:8080"
    assert upstream_label("http://gpu1:8080") == "http://gpu1:8080"
