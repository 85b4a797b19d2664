"""A real Prometheus for the tests (Debian's `prometheus` package, installed by .ci/run): started on a
loopback port, scraping the given targets every second, with rule files evaluated every second; and
`fleet`, two proxies (each before its own stand-in spec and plain llama-servers) under traffic, scraped
by one. Tests that need it skip with the reason where the binary is missing."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from llama_server import free_port
from test_proxy import PATHS, POLICY, proxy
from upstream import FakeUpstream, request_body
from waiting import wait_until

from specmon.policy.schema import parse_policy

INTERVAL_S = 1  # scrape and rule evaluation interval
CLASSES = ("chat", "code-edit", "rewrite")


def needs_prometheus() -> str:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("no prometheus binary: apt-get install prometheus (.ci/run does)")
    return binary


class Prometheus:
    def __init__(self, url: str, config: Path | None = None):
        self.url = url
        self.config = config  # its configuration file (JSON), which stop_scraping rewrites

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        """An instant query's result: [{"metric": {labels}, "value": [t, "v"]}, ...]; evaluated at `at`
        (seconds since the epoch) where given, else now."""
        params = {"query": expr} if at is None else {"query": expr, "time": repr(at)}
        reply = httpx.get(f"{self.url}/api/v1/query", params=params, timeout=10)
        body = reply.json()
        assert body.get("status") == "success", f"{expr}: {body}"
        return body["data"]["result"]

    def values(self, expr: str, *by: str, at: float | None = None) -> dict[tuple, float]:
        """The query's series as {(label values in `by`): value}."""
        return {tuple(s["metric"].get(k, "") for k in by): float(s["value"][1]) for s in self.query(expr, at)}

    def scraped_after(self, t: float) -> None:
        """Wait until every target was scraped (healthy) after time.time() `t`, twice over (the counters a
        request moved are in the scrape that began after it ended)."""

        def fresh() -> bool:
            active = httpx.get(f"{self.url}/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
            return bool(active) and all(
                a["health"] == "up" and _epoch(a["lastScrape"]) > t + INTERVAL_S for a in active
            )

        wait_until(fresh, "a scrape of every target after the traffic", timeout=60, poll_s=0.2)

    def stop_scraping(self) -> None:
        """Take every target away (a reload with none): their series go stale and no sample lands after,
        so a rule evaluated from then on and a query at its time read the same samples."""
        config = json.loads(self.config.read_text())
        config["scrape_configs"] = []
        self.config.write_text(json.dumps(config))
        reply = httpx.post(f"{self.url}/-/reload", timeout=30)
        assert reply.status_code == 200, reply.text

        def gone() -> bool:
            return not httpx.get(f"{self.url}/api/v1/targets", timeout=10).json()["data"]["activeTargets"]

        wait_until(gone, "no target left after the reload", timeout=30, poll_s=0.1)

    def rules_evaluated_after(self, t: float) -> None:
        def fresh() -> bool:
            groups = httpx.get(f"{self.url}/api/v1/rules", timeout=10).json()["data"]["groups"]
            return bool(groups) and all(_epoch(g["lastEvaluation"]) > t + INTERVAL_S for g in groups)

        wait_until(fresh, "a rule evaluation after the scrapes", timeout=60, poll_s=0.2)


def _epoch(stamp: str) -> float:
    """Prometheus' RFC 3339 time (nanoseconds, Z or an offset) as seconds since the epoch."""
    from datetime import datetime

    head, _, rest = stamp.partition(".")
    digits = "".join(ch for ch in rest if ch.isdigit())
    zone = rest[len(digits) :] or "Z"
    whole = datetime.fromisoformat(head + (zone if zone != "Z" else "+00:00")).timestamp()
    return whole + (float("0." + digits) if digits else 0.0)


@contextmanager
def prometheus(tmp: Path, targets: list[str], rule_files: tuple[Path, ...] = ()) -> Iterator[Prometheus]:
    """Prometheus on a free loopback port, scraping `targets` (host:port) every second, its data in tmp."""
    binary = needs_prometheus()
    config = {
        "global": {"scrape_interval": f"{INTERVAL_S}s", "evaluation_interval": f"{INTERVAL_S}s"},
        "rule_files": [str(f) for f in rule_files],
        "scrape_configs": [{"job_name": "specmon", "static_configs": [{"targets": targets}]}],
    }
    path = tmp / "prometheus.yml"
    path.write_text(json.dumps(config))  # YAML is a superset of JSON
    port = free_port()
    command = [
        binary,
        f"--config.file={path}",
        f"--storage.tsdb.path={tmp / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
        "--web.enable-lifecycle",  # POST /-/reload: a test can take the targets away (stop_scraping)
    ]
    with open(tmp / "prometheus.log", "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _ready(url) or process.poll() is not None, "Prometheus ready", timeout=60, poll_s=0.1)
        assert process.poll() is None, (tmp / "prometheus.log").read_text()
        yield Prometheus(url, path)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/-/ready", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass
class Fleet:
    prometheus: Prometheus
    logs: list[Path]  # each proxy's log
    instances: list[str]  # each proxy's host:port, as Prometheus labels its series


def traffic(url: str, requests: int, offset: int = 0) -> None:
    """Requests of every class in turn, chat and completion, streamed and whole."""
    for i in range(offset, offset + requests):
        endpoint = ("chat", "completion")[i % 2]
        body = request_body(endpoint, stream=bool(i % 3))
        headers = {"X-Specmon-Class": CLASSES[i % 3]}
        reply = httpx.post(url + PATHS[endpoint], json=body, headers=headers, timeout=30)
        assert reply.status_code == 200, reply.text


@contextmanager
def fleet(tmp: Path, requests: int = 48, rule_files: tuple[Path, ...] = ()) -> Iterator[Fleet]:
    """Two proxies, each before its own spec and plain stand-in llama-servers, with `requests` each (the
    second proxy's traffic starts elsewhere in the rotation), and a Prometheus that scraped both after.
    The first routes (every class goes plain: spec is slower in every recorded reply); the second only
    advises, so every class is routed spec there with a fixed share plain."""
    needs_prometheus()
    with ExitStack() as stack:
        proxies, logs = [], []
        for n in range(2):
            spec = stack.enter_context(FakeUpstream())
            plain = stack.enter_context(FakeUpstream("-plain"))
            logs.append(tmp / f"proxy{n}.specmon")
            mode = ("enforce", "advise")[n]  # one routes; one sends every class to spec, a share plain
            policy = parse_policy(POLICY.text.replace('mode = "enforce"', f'mode = "{mode}"'), f"{mode}.toml")
            proxies.append(stack.enter_context(proxy(logs[-1], spec.url, plain.url, policy=policy)))
        instances = [p.url.removeprefix("http://") for p in proxies]
        prom = stack.enter_context(prometheus(tmp, instances, rule_files))
        for n, p in enumerate(proxies):
            traffic(p.url, requests, offset=n)
        prom.scraped_after(time.time())
        if rule_files:
            prom.rules_evaluated_after(time.time())
        yield Fleet(prom, logs, instances)
