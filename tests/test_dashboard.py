"""docs/grafana/specmon.json against a real Prometheus: every panel's every query, on a fleet of two
proxies, returns series carrying the labels its legend names, and nothing for an instance or a class
that is not there; the failover panel on a proxy whose plain member is dead; the panels serve has
names for on a serve's /metrics; the variables list what they are for; and the file is what
scripts/dashboard.py writes."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from llama_server import free_port
from prometheus import CLASSES, fleet, prometheus, traffic
from test_proxy import proxy
from upstream import FakeUpstream

from specmon.events.log import read_log
from specmon.events.schema import Decision, RoundVerified
from specmon.server.metrics import ServerMetrics

REPO = Path(__file__).resolve().parent.parent
DASHBOARD = REPO / "docs" / "grafana" / "specmon.json"
SCRIPT = REPO / "scripts" / "dashboard.py"
SERVE_LOG = Path(__file__).parent / "fixtures" / "session-serve.specmon"
WINDOW = "1m"  # $__rate_interval and its kin: a window that covers the tests' few seconds of traffic
NOWHERE = "no-such-value"  # an instance or class no series has
SERVE_LACKS = {"side", "upstream"}  # serve's series carry class (and k) alone
NEEDS_A_FAILOVER = {"Failovers"}  # a fleet whose upstreams all answer has no series for these
SERVES = {"Acceptance", "Tokens per step", "Goodput, the server's clock", "Routing moves"}  # the rest: proxy only


def panels(board: dict | None = None) -> list[dict]:
    """The dashboard's panels, rows left out (inside a collapsed row as well)."""
    board = board or json.loads(DASHBOARD.read_text())
    found = []
    for panel in board["panels"]:
        if panel["type"] == "row":
            found.extend(panel.get("panels", []))
        else:
            found.append(panel)
    return found


def concrete(expr: str, instance: str = ".*", cls: str = ".*", window: str = WINDOW, step: str = WINDOW) -> str:
    """The expression as Grafana would send it with these variable values ($__interval: the query's step);
    a variable this does not know fails, so a new one is handled here before it ships."""
    windows = {"__rate_interval": window, "__range": window, "__interval": step}
    values = {"instance": instance, "class": cls, "datasource": "", **windows}

    def value(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        if name.isdigit():  # label_replace's ${1}: no variable, Grafana leaves it
            return match.group(0)
        assert name in values, f"unknown Grafana variable ${name} in {expr}"
        return values[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


def legend_labels(legend: str) -> set[str]:
    return set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))


def variable_query(name: str) -> tuple[str, str]:
    """A query variable's label_values(selector, label), as (selector, label)."""
    board = json.loads(DASHBOARD.read_text())
    (variable,) = [v for v in board["templating"]["list"] if v["name"] == name]
    found = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", variable["query"])
    assert found, variable["query"]
    return found.group(1), found.group(2)


def listed(prom, name: str, instance: str = ".*") -> set[str]:
    """What the variable lists: the label's values over the selector's series."""
    selector, label = variable_query(name)
    return {s["metric"][label] for s in prom.query(f"count by ({label}) ({concrete(selector, instance)})")}


def answers(prom, panel: dict, target: dict, lacks: set[str] = frozenset(), **values) -> list[dict]:
    """The target's series that carry every label its legend names (less `lacks`) and a finite value."""
    wanted = legend_labels(target["legendFormat"]) - lacks
    series = prom.query(concrete(target["expr"], **values))
    good = [s for s in series if all(s["metric"].get(k) for k in wanted) and math.isfinite(float(s["value"][1]))]
    assert good, f"{panel['title']} {target['refId']}: no series with {sorted(wanted)} and a value: {series}"
    return good


def targets() -> list[tuple[dict, dict]]:
    return [(panel, target) for panel in panels() for target in panel["targets"]]


def assert_filtered(prom, panel: dict, target: dict) -> None:
    """An instance, or a class, that no series has leaves the query nothing."""
    assert prom.query(concrete(target["expr"], instance=NOWHERE)) == [], panel["title"]
    if "$class" in target["expr"]:
        assert prom.query(concrete(target["expr"], cls=NOWHERE)) == [], panel["title"]


def again(prom, urls: list[str], requests: int = 24) -> None:
    """A second wave on counters Prometheus already holds: a series born mid-traffic has no sample from
    before it, so only counters that move after their first scrape give rates."""
    for n, url in enumerate(urls):
        traffic(url, requests, offset=n)
    prom.scraped_after(time.time())


def test_every_panel_answers_on_a_fleet_of_proxies(tmp_path):
    with fleet(tmp_path) as f:
        prom, one = f.prometheus, f.instances[0]
        again(prom, [f"http://{instance}" for instance in f.instances])
        for panel, target in targets():
            if panel["title"] in NEEDS_A_FAILOVER:
                continue  # the next test
            every = answers(prom, panel, target)
            if "instance" in legend_labels(target["legendFormat"]):
                assert {s["metric"]["instance"] for s in answers(prom, panel, target, instance=one)} == {one}
            if "$class" in target["expr"]:
                picked = every[0]["metric"].get("class", CLASSES[0])  # one with a figure now
                assert {s["metric"].get("class", picked) for s in answers(prom, panel, target, cls=picked)} == {picked}
            assert_filtered(prom, panel, target)
        assert listed(prom, "instance") == set(f.instances)
        assert listed(prom, "class", instance=one) >= set(CLASSES)


def test_every_selector_is_filtered_by_instance_and_class():
    for panel, target in targets():
        for name, where in re.findall(r"(specmon_\w+)\{([^}]*)\}", target["expr"]):
            assert 'instance=~"$instance"' in where, f"{panel['title']}: {name}"
            if name != "specmon_upstream_up":  # the one name here without a class label
                assert 'class=~"$class"' in where, f"{panel['title']}: {name}"


def test_the_failover_panels_count_a_failover_and_a_member_that_is_down(tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"
    with FakeUpstream() as spec, proxy(tmp_path / "p.specmon", spec.url, dead) as p:
        with prometheus(tmp_path, [p.url.removeprefix("http://")]) as prom:
            again(prom, [p.url], requests=6)  # half alternate to plain, whose one member refuses: counters born
            again(prom, [p.url], requests=6)  # ... and moved
            for panel, target in targets():
                if panel["title"] in NEEDS_A_FAILOVER:
                    moved = answers(prom, panel, target)
                    counted = {(s["metric"]["routed"], s["metric"]["side"]) for s in moved if float(s["value"][1]) > 0}
                    assert counted == {("plain", "spec")}  # the other way's series is there, at 0
                    assert_filtered(prom, panel, target)
            ((up, target),) = [(p, t) for p, t in targets() if p["title"] == "Upstreams up"]
            states = {s["metric"]["upstream"]: float(s["value"][1]) for s in answers(prom, up, target)}
            assert states == {spec.url: 1.0, dead: 0.0}


@contextmanager
def served_metrics(metrics: ServerMetrics):
    """A serve's /metrics page (its own registry), on a free loopback port; yields its host:port."""
    from prometheus_client import start_http_server

    server, thread = start_http_server(0, addr="127.0.0.1", registry=metrics.registry)
    try:
        yield f"127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def recorded_requests() -> list[list[RoundVerified]]:
    """The recorded serve session's rounds, request by request, each cut in two halves (one per wave)."""
    rounds: dict[str, list[RoundVerified]] = {}
    for ev in read_log(SERVE_LOG):
        if isinstance(ev, RoundVerified):
            rounds.setdefault(ev.prompt_id, []).append(ev)
    return [half for each in rounds.values() for half in (each[: len(each) // 2], each[len(each) // 2 :])]


def a_decision(prompt_class: str) -> Decision:
    return Decision(
        session_id="serve",
        t=time.time(),
        decision_id=1,
        prompt_class=prompt_class,
        speculate_from=True,
        speculate_to=False,
        k_from=2,
        k_to=0,
        rule_key="policy.min_gain",
        rule_line=1,
        round_ids=[],
        applied=True,
        policy_sha256="",
    )


def test_serves_panels_answer_on_a_serves_metrics(tmp_path):
    metrics = ServerMetrics()
    requests = recorded_requests()
    first, second = requests[0::2], requests[1::2]
    with served_metrics(metrics) as instance, prometheus(tmp_path, [instance]) as prom:
        for wave in (first, second):
            for rounds in wave:
                metrics.count_rounds(rounds, sum(len(ev.emitted) for ev in rounds))
            metrics.observe(a_decision(first[0][0].prompt_class))  # a move in each wave
            prom.scraped_after(time.time())
        for panel, target in targets():
            if panel["title"] in SERVES:
                for s in answers(prom, panel, target, lacks=SERVE_LACKS):
                    assert not SERVE_LACKS & s["metric"].keys()
            else:  # the proxy's names, or its clock: nothing on serve, and no error
                assert prom.query(concrete(target["expr"])) == [], panel["title"]
        assert listed(prom, "instance") == {instance}
        assert listed(prom, "class") == {ev.prompt_class for rounds in requests for ev in rounds}


def test_the_shipped_file_is_what_the_script_writes():
    if importlib.util.find_spec("grafana_foundation_sdk") is None:
        pytest.skip("grafana-foundation-sdk is not installed: pip install -e '.[test]'")
    spec = importlib.util.spec_from_file_location("dashboard", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert DASHBOARD.read_text() == script.render()
