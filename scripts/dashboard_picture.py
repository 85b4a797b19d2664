"""A picture of the Grafana dashboard (docs/grafana/specmon.png), drawn from real query results, since
Grafana itself does not run here.

    .venv/bin/python scripts/dashboard_picture.py

Two proxies, each before a stand-in spec and a stand-in plain llama-server (the tests' fakes, replaying
recorded replies), take paced traffic of every class for about 80 s while a real Prometheus scrapes
them every second; one proxy's plain upstream is stopped for 20 s in the middle and started again.
Every target of docs/grafana/specmon.json is then asked of Prometheus with query_range, and each panel
is drawn with matplotlib where the dashboard places it, legends rendered from its legendFormat."""

from __future__ import annotations

import json
import re
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import FuncFormatter
except ImportError:
    print("scripts/dashboard_picture.py draws with matplotlib: .venv/bin/pip install matplotlib")
    sys.exit(1)

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the tests' stand-in upstreams, proxy and Prometheus

from prometheus import prometheus, traffic  # noqa: E402
from test_dashboard import concrete, panels  # noqa: E402
from test_proxy import proxy  # noqa: E402
from test_proxy_upstream import FakeUpstream  # noqa: E402

OUT = REPO / "docs" / "grafana" / "specmon.png"
DASHBOARD = REPO / "docs" / "grafana" / "specmon.json"
RUN_S, OUTAGE_S = 80, (30, 50)  # the traffic, and when proxy 2's plain upstream is down
PACE_S = 0.2  # between one proxy's requests
WINDOW = "20s"  # $__rate_interval in the picture: smooth enough at a 1 s step
STEP_S = 1
# Grafana's dark theme and classic palette
BACKGROUND, CARD, TEXT, FAINT, GRID = "#111217", "#181b1f", "#ccccdc", "#8e8e9a", "#2c3235"
PALETTE = ["#73BF69", "#F2CC0C", "#8AB8FF", "#FF780A", "#F2495C", "#5794F2", "#B877D9", "#705DA0", "#37872D"]
NAMED = {"green": "#73BF69", "yellow": "#FADE2A", "blue": "#5794F2", "red": "#F2495C"}
WIDTH_IN, ROW_IN, HEAD_IN, FOOT_IN = 18.0, 0.36, 0.75, 0.45  # 24 grid columns across; one grid row's height
LEGEND_PAD_IN, LEGEND_LINE_IN = 0.1, 0.17


def paced(url: str, offset: int, stop: threading.Event) -> None:
    """One proxy's traffic: every class in turn, chat and completion, streamed and whole, until `stop`."""
    i = offset
    while not stop.is_set():
        traffic(url, 1, offset=i)
        i += 1
        stop.wait(PACE_S)


def run_fleet(tmp: Path) -> tuple[dict, float, float]:
    """Runs the traffic and the outage; returns every target's series (frames) and the run's start and end."""
    with ExitStack() as stack:
        urls, plains = [], []
        for n in range(2):
            spec = stack.enter_context(FakeUpstream())
            plains.append(stack.enter_context(FakeUpstream("-plain")))
            urls.append(stack.enter_context(proxy(tmp / f"proxy{n}.specmon", spec.url, plains[-1].url)).url)
        prom = stack.enter_context(prometheus(tmp, [u.removeprefix("http://") for u in urls]))
        start, stop = time.time(), threading.Event()
        threads = [threading.Thread(target=paced, args=(u, n, stop)) for n, u in enumerate(urls)]
        for t in threads:
            t.start()
        time.sleep(OUTAGE_S[0])
        plains[1].__exit__()  # down: proxy 2's plain requests fail over to spec
        time.sleep(OUTAGE_S[1] - OUTAGE_S[0])
        plains[1].__enter__()  # the same port again: the proxy's /health probe brings it back
        time.sleep(RUN_S - OUTAGE_S[1])
        stop.set()
        for t in threads:
            t.join()
        end = time.time()
        prom.scraped_after(end)
        return frames(prom.url, start, end + 2), start, end


def frames(url: str, start: float, end: float) -> dict[tuple[int, str], list[dict]]:
    """(panel id, refId) -> its query_range series."""
    found = {}
    for panel in panels():
        for target in panel["targets"]:
            query = concrete(target["expr"], window=WINDOW, step=f"{STEP_S}s")
            params = {"query": query, "start": start, "end": end, "step": STEP_S}
            body = httpx.get(f"{url}/api/v1/query_range", params=params, timeout=30).json()
            assert body["status"] == "success", body
            found[(panel["id"], target["refId"])] = body["data"]["result"]
    return found


def legend(fmt: str, labels: dict) -> str:
    return " ".join(re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).split())


def points(series: dict) -> tuple[list[datetime], list[float]]:
    return [datetime.fromtimestamp(t) for t, _ in series["values"]], [float(v) for _, v in series["values"]]


def unit_format(unit: str) -> FuncFormatter:
    if unit == "percentunit":
        return FuncFormatter(lambda v, _: f"{v * 100:.0f}%")
    if unit.startswith("suffix:"):
        return FuncFormatter(lambda v, _: f"{v:g}{unit.removeprefix('suffix:')}")
    if unit == "reqps":
        return FuncFormatter(lambda v, _: f"{v:g} req/s")
    return FuncFormatter(lambda v, _: f"{v:g}")


def card(fig, panel: dict) -> tuple[float, float, float, float]:
    """Draws the panel's card and title; returns its box (left, bottom, width, height) in inches."""
    g = panel["gridPos"]
    height_in = fig.get_figheight()
    left, width = g["x"] / 24 * WIDTH_IN + 0.05, g["w"] / 24 * WIDTH_IN - 0.1
    top, height = HEAD_IN + g["y"] * ROW_IN + 0.05, g["h"] * ROW_IN - 0.1
    bottom = height_in - top - height
    box = (left / WIDTH_IN, bottom / height_in, width / WIDTH_IN, height / height_in)
    fig.patches.append(Rectangle(box[:2], *box[2:], transform=fig.transFigure, color=CARD, zorder=-1))  # under the axes
    fig.text(box[0] + 0.08 / WIDTH_IN, box[1] + box[3] - 0.22 / height_in, panel["title"], color=TEXT, fontsize=10)
    return left, bottom, width, height


def axes_in(fig, box: tuple[float, float, float, float], left_in: float, below_in: float):
    left, bottom, width, height = box
    w, h = fig.get_figwidth(), fig.get_figheight()
    rect = ((left + left_in) / w, (bottom + below_in) / h, (width - left_in - 0.15) / w, (height - below_in - 0.35) / h)
    ax = fig.add_axes(rect, facecolor=CARD)
    ax.tick_params(colors=FAINT, labelsize=8)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
    ax.xaxis.set_major_locator(mdates.SecondLocator(bysecond=range(0, 60, 20)))
    return ax


def legend_lines(entries: list[tuple[str, str]], width: float) -> list[list[tuple[float, str, str]]]:
    """Grafana's list legend wrapped to the panel's width: lines of (inches from the left, name, colour)."""
    lines: list[list[tuple[float, str, str]]] = [[]]
    x = LEGEND_PAD_IN
    for text, colour in entries:
        span = 0.35 + 0.07 * len(text)  # the dash, the name at 8 pt, a gap
        if x + span > width and lines[-1]:
            lines.append([])
            x = LEGEND_PAD_IN
        lines[-1].append((x, text, colour))
        x += span
    return lines


def legend_rows(fig, box, entries: list[tuple[str, str]]) -> None:
    left, bottom, width, _ = box
    w, h = fig.get_figwidth(), fig.get_figheight()
    lines = legend_lines(entries, width)
    for n, line in enumerate(lines):
        y = bottom + 0.08 + LEGEND_LINE_IN * (len(lines) - 1 - n)
        for x, text, colour in line:
            fig.text((left + x) / w, y / h, "━", color=colour, fontsize=10)
            fig.text((left + x + 0.2) / w, y / h, text, color=TEXT, fontsize=8)


def draw_timeseries(fig, panel: dict, found: dict, start: float, end: float) -> None:
    box = card(fig, panel)
    series = [(t, s) for t in panel["targets"] for s in found[(panel["id"], t["refId"])]]
    names = [legend(t["legendFormat"], s["metric"]) for t, s in series]
    colours = [PALETTE[i % len(PALETTE)] for i in range(len(series))]
    below = 0.4 + LEGEND_LINE_IN * len(legend_lines(list(zip(names, colours)), box[2]))
    ax = axes_in(fig, box, 0.75, below)
    for (target, s), colour in zip(series, colours):
        times, values = points(s)
        dashed = target["refId"] != "A"  # a second target (the share set, beside the share sent)
        ax.plot(times, values, color=colour, linewidth=1.4, linestyle="--" if dashed else "-")
    ax.set_xlim(datetime.fromtimestamp(start), datetime.fromtimestamp(end))
    ax.set_ylim(bottom=panel["fieldConfig"]["defaults"].get("min", None))
    ax.yaxis.set_major_formatter(unit_format(panel["fieldConfig"]["defaults"].get("unit", "")))
    ax.grid(color=GRID, linewidth=0.6)
    if not series:
        ax.text(0.5, 0.5, "No data", transform=ax.transAxes, ha="center", color=FAINT)
    legend_rows(fig, box, list(zip(names, colours)))


def draw_timeline(fig, panel: dict, found: dict, start: float, end: float) -> None:
    box = card(fig, panel)
    (mapping,) = panel["fieldConfig"]["defaults"]["mappings"]
    states = {float(k): (v["text"], NAMED[v["color"]]) for k, v in mapping["options"].items()}
    (target,) = panel["targets"]
    series = sorted(found[(panel["id"], "A")], key=lambda s: legend(target["legendFormat"], s["metric"]))
    ax = axes_in(fig, box, 2.0, 0.6)
    for row, s in enumerate(series):
        times, values = points(s)
        for t, v, t_next in zip(times, values, times[1:] + [datetime.fromtimestamp(end)]):
            if v in states:
                ax.barh(row, t_next - t, left=t, height=0.8, color=states[v][1], linewidth=0)
    ax.set_yticks(range(len(series)), [legend(target["legendFormat"], s["metric"]) for s in series])
    ax.tick_params(axis="y", labelsize=8, labelcolor=TEXT, length=0)
    ax.invert_yaxis()
    ax.set_xlim(datetime.fromtimestamp(start), datetime.fromtimestamp(end))
    legend_rows(fig, box, [states[k] for k in sorted(states)])


def header(fig, start: float, end: float) -> None:
    h = fig.get_figheight()
    fig.text(0.1 / WIDTH_IN, 1 - 0.32 / h, "specmon: speculative decoding", color=TEXT, fontsize=13, weight="bold")
    span = f"{datetime.fromtimestamp(start):%H:%M:%S} to {datetime.fromtimestamp(end):%H:%M:%S}"
    picked = f"Prometheus: Prometheus    instance: All    class: All    {span}"
    fig.text(0.1 / WIDTH_IN, 1 - 0.6 / h, picked, color=FAINT, fontsize=9)


def rows(fig, board_rows: list[dict]) -> None:
    h = fig.get_figheight()
    for row in board_rows:
        y = HEAD_IN + row["gridPos"]["y"] * ROW_IN + 0.24
        fig.text(0.1 / WIDTH_IN, 1 - y / h, row["title"], color=TEXT, fontsize=11, weight="bold")


def footnote(fig) -> None:
    note = (
        "Drawn by scripts/dashboard_picture.py with matplotlib from Prometheus query_range results of the queries in "
        f"docs/grafana/specmon.json ($__rate_interval = {WINDOW}, step {STEP_S} s), not by Grafana. Two proxies "
        "before stand-in llama-servers that replay recorded replies;\nproxy 2's plain upstream stopped for 20 s. "
        "The recorded replies accept every draft (100%, 4 tok/step) and come at once (the proxy's clock reads "
        "thousands of tok/s); the class rotation is the tests'."
    )
    fig.text(0.1 / WIDTH_IN, 0.08 / fig.get_figheight(), note, color=FAINT, fontsize=8, linespacing=1.5)


def draw(found: dict, start: float, end: float) -> None:
    board = json.loads(DASHBOARD.read_text())
    bottom = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in board["panels"])
    fig = plt.figure(figsize=(WIDTH_IN, HEAD_IN + bottom * ROW_IN + FOOT_IN), facecolor=BACKGROUND)
    header(fig, start, end)
    rows(fig, [p for p in board["panels"] if p["type"] == "row"])
    for panel in panels(board):
        drawn = draw_timeline if panel["type"] == "state-timeline" else draw_timeseries
        drawn(fig, panel, found, start, end)
    footnote(fig)
    fig.savefig(OUT, dpi=100, facecolor=BACKGROUND)
    print(OUT)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="specmon-dashboard-") as tmp:
        found, start, end = run_fleet(Path(tmp))
    draw(found, start, end)
    return 0


if __name__ == "__main__":
    sys.exit(main())
