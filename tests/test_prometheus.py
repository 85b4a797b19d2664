"""PromQL over two proxies' /metrics, scraped by a real Prometheus (tests/prometheus.py), against what their
logs say; and the rules shipped in docs/prometheus: promtool's check and unit tests, the recorded series
against their expressions over the same samples, and the alert's join on the labels a proxy exports."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus import CLASSES, INTERVAL_S, Fleet, Prometheus, fleet
from test_proxy import PATHS
from upstream import request_body

from specmon.events.log import read_log
from specmon.metrics.served import RequestTotals
from specmon.policy.route import PLAIN, SPEC
from specmon.proxy.tables import COLUMNS
from events import tally_of

REPO = Path(__file__).resolve().parent.parent
RULES = REPO / "docs" / "prometheus" / "specmon-rules.yml"
RULE_TESTS = RULES.with_name("specmon-rules.test.yml")
ALERT = "SpecmonSpeculationSlower"
LEARNING = "non-english"  # a class of the default policy the fleet's traffic leaves out: it borrows the others' replies
SIDES = (SPEC, PLAIN)
CLOCKS = ("server", "proxy")
ROUNDING = 1e-12  # relative: PromQL divides by seconds and sums in its own order, the log by ms

ACCEPTED = "specmon_spec_decode_num_accepted_tokens_total"
DRAFTED = "specmon_spec_decode_num_draft_tokens_total"
TOKENS, SECONDS = "specmon_decode_tokens_total", "specmon_decode_seconds_total"
REQUESTS = "specmon_proxy_requests_total"

# figure -> (PromQL over the raw counters, as docs/metrics.md writes it, and the labels it keeps)
WHOLE = {
    "drafted tokens": (f"sum by (class) ({DRAFTED})", ("class",)),
    "acceptance": (f"sum by (class) ({ACCEPTED}) / sum by (class) ({DRAFTED})", ("class",)),
    "goodput tok/s": (
        f'sum by (class, side) ({TOKENS}{{clock="server"}}) / sum by (class, side) ({SECONDS}{{clock="server"}})',
        ("class", "side"),
    ),
    "routed plain": (f'sum by (class) ({REQUESTS}{{side="plain"}}) / sum by (class) ({REQUESTS})', ("class",)),
}

GOODPUT = "class_side_clock:specmon_goodput_tokens_per_second:ratio_rate5m"
SPEC_OVER_PLAIN = "class_clock:specmon_goodput_spec_over_plain:ratio_rate5m"
# recording rule -> (its expression written out here, over the raw counters, and the labels it keeps)
RECORDED = {
    "class:specmon_acceptance:ratio_rate5m": (
        f"sum by (class) (rate({ACCEPTED}[5m])) / sum by (class) (rate({DRAFTED}[5m]))",
        ("class",),
    ),
    GOODPUT: (
        f"sum by (class, side, clock) (rate({TOKENS}[5m])) / sum by (class, side, clock) (rate({SECONDS}[5m]))",
        ("class", "side", "clock"),
    ),
    "class:specmon_routed_plain:ratio_rate5m": (
        f'sum by (class) (rate({REQUESTS}{{side="plain"}}[5m])) / sum by (class) (rate({REQUESTS}[5m]))',
        ("class",),
    ),
}


@dataclass
class Scraped:
    fleet: Fleet
    at: float  # a time by which every counter was final and the rules had been evaluated over them
    stopped: float  # when Prometheus had stopped scraping: no sample lands after


@pytest.fixture(scope="module")
def scraped(tmp_path_factory) -> Iterator[Scraped]:
    """The fleet under the rules, then the learning class in two waves with a scrape between: a series is
    first seen holding its requests so far, which no rate counts, so the second wave gives it a rate on
    both sides (a fleet class's other side has its 4 requests early, and often none after its first scrape)."""
    with fleet(tmp_path_factory.mktemp("fleet"), rule_files=(RULES,)) as f:
        for requests in (2, 4):
            learning_traffic(f, requests)
            f.prometheus.scraped_after(time.time())
        at = time.time() + 1.1  # the last evaluation by then is after the last scrape above
        f.prometheus.rules_evaluated_after(at - INTERVAL_S)
        f.prometheus.stop_scraping()
        stopped = time.time()
        f.prometheus.rules_evaluated_after(stopped)
        yield Scraped(f, at, stopped)


def learning_traffic(f: Fleet, requests: int) -> None:
    """`requests` of the learning class to each proxy: the routing one sends them plain (the other classes'
    replies placed it there), the advising one to spec with its fixed share plain; chat and completion
    requests on each side."""
    for instance in f.instances:
        for i in range(requests):
            endpoint = ("chat", "completion")[i // 2 % 2]
            body = request_body(endpoint, stream=i % 3 == 1)
            headers = {"X-Specmon-Class": LEARNING}
            reply = httpx.post(f"http://{instance}{PATHS[endpoint]}", json=body, headers=headers, timeout=30)
            assert reply.status_code == 200, reply.text


def summed_totals(logs: list[Path]) -> dict[tuple[str, str], RequestTotals]:
    """Each log's per (class, side) sums (what `log info` tables), added over the logs."""
    summed: dict[tuple[str, str], RequestTotals] = {}
    for log in logs:
        tally = tally_of(read_log(log))
        assert not tally.outcomes, tally.outcomes  # every request succeeded: no status left out of the sums
        for key, t in tally.totals.items():
            summed[key] = added(summed[key], t) if key in summed else t
    return summed


def added(a: RequestTotals, b: RequestTotals) -> RequestTotals:
    """Two logs' sums for one (class, side); llama-server gives no per-position counts to add."""
    assert not a.accepted_per_pos and not b.accepted_per_pos
    skipped = ("family", "accepted_per_pos")
    return replace(a, **{f.name: getattr(a, f.name) + getattr(b, f.name) for f in fields(a) if f.name not in skipped})


def logged_figures(totals: dict[tuple[str, str], RequestTotals]) -> dict[str, dict[tuple, float]]:
    """WHOLE's figures from the logs' sums, keyed as the PromQL's labels."""
    sides = {c: (totals[c, SPEC], totals[c, PLAIN]) for c, _ in totals}
    return {
        "drafted tokens": {(c,): s.draft_n + p.draft_n for c, (s, p) in sides.items()},
        "acceptance": {
            (c,): (s.draft_n_accepted + p.draft_n_accepted) / (s.draft_n + p.draft_n) for c, (s, p) in sides.items()
        },
        "goodput tok/s": {key: t.predicted_n / t.predicted_ms * 1e3 for key, t in totals.items()},
        "routed plain": {(c,): p.requests / (s.requests + p.requests) for c, (s, p) in sides.items()},
    }


def test_promql_over_both_proxies_equals_their_logs_summed(scraped):
    prom, at = scraped.fleet.prometheus, scraped.at
    totals = summed_totals(scraped.fleet.logs)
    assert set(totals) == {(c, s) for c in (*CLASSES, LEARNING) for s in SIDES}  # what the traffic produced
    rows = []
    for figure, logged in logged_figures(totals).items():
        expr, by = WHOLE[figure]
        promql = prom.values(expr, *by, at=at)
        assert promql.keys() == logged.keys(), figure
        for key, value in sorted(logged.items()):
            assert value > 0 and math.isclose(promql[key], value, rel_tol=ROUNDING), (figure, key)
            rows.append((key[0], key[1] if len(key) > 1 else "both", figure, promql[key], value))
    print_table(("class", "side", "figure", "PromQL", "logs"), rows)


def test_log_info_prints_what_promql_says_of_each_proxy(scraped):
    """Each proxy's requests and tok/s per (class, side), as `specmon log info` prints them from its log."""
    prom, at = scraped.fleet.prometheus, scraped.at
    rows = []
    for n, (log, instance) in enumerate(zip(scraped.fleet.logs, scraped.fleet.instances)):
        printed = printed_rows(log)
        # the routing proxy sent the learning class plain from its first request (the others' replies said so)
        learned = {(LEARNING, PLAIN)} if n == 0 else {(LEARNING, s) for s in SIDES}
        assert set(printed) == {(c, s) for c in CLASSES for s in SIDES} | learned
        own = f'instance="{instance}"'
        requests = prom.values(f"sum by (class, side) ({REQUESTS}{{{own}}})", "class", "side", at=at)
        speed = prom.values(
            f'sum by (class, side) ({TOKENS}{{{own},clock="server"}})'
            f' / sum by (class, side) ({SECONDS}{{{own},clock="server"}})',
            "class",
            "side",
            at=at,
        )
        for key, (count, tok_per_s) in sorted(printed.items()):
            assert count > 0 and requests[key] == count, key
            assert tok_per_s == f"{speed[key]:.1f}", key  # unmarked: the servers' clock, as the PromQL's
            rows.append((f"proxy {n}", *key, f"{requests[key]:.0f}", count, f"{speed[key]:.4f}", tok_per_s))
    print_table(("log", "class", "side", "requests PromQL", "printed", "tok/s PromQL", "printed"), rows)


def printed_rows(log: Path) -> dict[tuple[str, str], tuple[int, str]]:
    """`log info`'s per-class table: (class, side) -> (requests, the tok/s cell)."""
    done = subprocess.run(
        [sys.executable, "-m", "specmon.cli", "log", "info", str(log)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    rows = {}
    for cells in (line.split() for line in done.stdout.splitlines()):
        if len(cells) == len(COLUMNS) and cells[0] in (*CLASSES, LEARNING) and cells[1] in SIDES:
            rows[cells[0], cells[1]] = (int(cells[2]), cells[-1])
    return rows


def print_table(header: tuple[str, ...], rows: list[tuple]) -> None:
    cells = [header, *[tuple(v if isinstance(v, str) else f"{v:.10g}" for v in row) for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    print()
    for row in cells:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())


def promtool(*args: str) -> subprocess.CompletedProcess:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.skip("no promtool binary: apt-get install prometheus (.ci/run does)")
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=60)


def rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_promtool_checks_the_rules():
    done = promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    names = [rule.get("record") or rule.get("alert") for rule in rules()]
    assert sorted(names) == sorted([*RECORDED, SPEC_OVER_PLAIN, ALERT])
    assert f"SUCCESS: {len(names)} rules found" in done.stdout


def test_the_rules_unit_tests_pass_and_fail_for_a_broken_alert(tmp_path):
    done = promtool("test", "rules", str(RULE_TESTS))
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr
    text = RULES.read_text()
    route = '\n          and on (class)\n          max by (class) (specmon_route_side{side="spec"}) == 1'
    for name, broken in {
        "alerts a class routed plain": text.replace(route, ""),
        "alerts on both clocks": text.replace("or ignoring (clock)", "or"),
        "fires before 15 minutes": text.replace("for: 15m", "for: 5m"),
    }.items():
        assert broken != text, name
        folder = tmp_path / name.replace(" ", "-")
        folder.mkdir()
        (folder / RULES.name).write_text(broken)
        (folder / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
        done = promtool("test", "rules", str(folder / RULE_TESTS.name))
        assert done.returncode == 1 and "FAILED" in done.stdout + done.stderr, name


def test_the_recorded_series_equal_their_expressions_over_the_same_samples(scraped):
    prom = scraped.fleet.prometheus
    classes = {*CLASSES, LEARNING}
    for record, (expr, by) in RECORDED.items():
        when, recorded = last_recorded(prom, record, by)
        assert when > scraped.stopped, record  # evaluated once every sample had landed
        assert_same(recorded, prom.values(expr, *by, at=when), record)
        assert {key[0] for key in recorded} == classes, record
    when, ratio = last_recorded(prom, SPEC_OVER_PLAIN, ("class", "clock"))
    goodput = prom.values(RECORDED[GOODPUT][0], *RECORDED[GOODPUT][1], at=when)
    expected = {(c, clock): goodput[c, SPEC, clock] / goodput[c, PLAIN, clock] for c in classes for clock in CLOCKS}
    assert_same(ratio, expected, SPEC_OVER_PLAIN)


def last_recorded(prom: Prometheus, record: str, by: tuple[str, ...]) -> tuple[float, dict[tuple, float]]:
    """A recording rule's last evaluation: its time, and its series' values then."""
    last = {tuple(s["metric"][k] for k in by): s["values"][-1] for s in prom.query(f"{record}[10s]")}
    times = {t for t, _ in last.values()}
    assert len(times) == 1, f"{record}: its series were last written at {times}"
    return times.pop(), {key: float(v) for key, (_, v) in last.items()}


def assert_same(recorded: dict[tuple, float], direct: dict[tuple, float], record: str) -> None:
    """One value per key, to float rounding (NaN where a side's series never grew within Prometheus' view);
    the learning class's, which grew on both sides, positive."""
    assert recorded.keys() == direct.keys(), record
    for key, value in recorded.items():
        same = math.isclose(value, direct[key], rel_tol=ROUNDING) or math.isnan(value) and math.isnan(direct[key])
        assert same, (record, key, value, direct[key])
    learning = [value for key, value in recorded.items() if key[0] == LEARNING]
    assert learning and all(value > 0 for value in learning), (record, learning)


def test_the_alert_joins_the_route_on_the_series_a_proxy_exports(scraped):
    """On the fleet, at one evaluation: the alert is pending for exactly the classes routed spec whose ratio
    is under 1; without its threshold, its expression gives each class routed spec once, on the servers' clock."""
    prom, at = scraped.fleet.prometheus, scraped.at
    routes = prom.values(f'max by (class) (specmon_route_side{{side="{SPEC}"}})', "class", at=at)
    routed_spec = {c for (c,), v in routes.items() if v == 1}
    assert routed_spec == {*CLASSES, LEARNING}, routes  # the advising proxy sends every class to spec
    ratio = prom.values(SPEC_OVER_PLAIN, "class", "clock", at=at)
    # the learning class has a rate on both sides (its traffic came after the first scrape): slower on spec
    assert ratio[LEARNING, "server"] < 1, ratio
    alerts = prom.query(f'ALERTS{{alertname="{ALERT}"}}', at=at)
    pending = {a["metric"]["class"] for a in alerts}
    assert LEARNING in pending and pending == {c for c in routed_spec if ratio[c, "server"] < 1}
    expr = next(rule["expr"] for rule in rules() if rule.get("alert") == ALERT)
    assert expr.count(") < 1\n") == 1
    joined = prom.values(expr.replace(") < 1\n", ") != 0\n"), "class", "clock", at=at)  # NaN != 0 is kept
    assert set(joined) == {(c, "server") for c in routed_spec}
