"""The Grafana dashboard for `specmon serve` and `specmon proxy`, built with Grafana's own Python library
(grafana-foundation-sdk) and written to docs/grafana/specmon.json.

    .venv/bin/python scripts/dashboard.py           # write docs/grafana/specmon.json
    .venv/bin/python scripts/dashboard.py --check   # exit 1 where the shipped file differs

Every figure is PromQL over the counters docs/metrics.md lists (counts are exported, ratios derived
here): rates over Grafana's $__rate_interval, and for routing moves and failovers their increase over
it; every series is filtered by the $instance and $class variables. serve has no side or upstream
labels, so its series come out per class alone; the routing and upstream panels read names only a
proxy exports."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grafana_foundation_sdk.builders.common import VizLegendOptions, VizTooltipOptions
from grafana_foundation_sdk.builders.dashboard import Dashboard, DatasourceVariable, QueryVariable, Row
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.builders.statetimeline import Panel as StateTimeline
from grafana_foundation_sdk.builders.timeseries import Panel as Timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common, dashboard

OUT = Path(__file__).resolve().parent.parent / "docs" / "grafana" / "specmon.json"
DATASOURCE = dashboard.DataSourceRef(type_val="prometheus", uid="${datasource}")
PICKED = 'instance=~"$instance", class=~"$class"'  # every series with a class label is filtered by both
RATE = "$__rate_interval"
BY_SIDE = "class, side"  # serve has no side: its series group by class alone
# the names each variable lists from: present from the start on a proxy (route, upstreams) and on serve
INSTANCES = 'label_values({__name__=~"specmon_upstream_up|specmon_queue_depth"}, instance)'
CLASSES = (
    'label_values({__name__=~"specmon_route_side|specmon_policy_speculate|specmon_decode_tokens_total",'
    ' instance=~"$instance"}, class)'
)
ROUTES = {"both": (0, "alternating", "yellow"), "spec": (1, "spec", "green"), "plain": (2, "plain", "blue")}


def rate(metric: str, where: str = "") -> str:
    return f"rate({metric}{{{where}{PICKED}}}[{RATE}])"


def summed(by: str, metric: str, where: str = "") -> str:
    return f"sum by ({by}) ({rate(metric, where)})"


def acceptance() -> str:
    """Σ accepted / Σ drafted tokens."""
    accepted = summed(BY_SIDE, "specmon_spec_decode_num_accepted_tokens_total")
    return f"{accepted} / {summed(BY_SIDE, 'specmon_spec_decode_num_draft_tokens_total')}"


def tokens_per_step() -> str:
    """(Σ accepted + Σ target steps) / Σ target steps: each step emits one token of its own."""
    accepted = summed(BY_SIDE, "specmon_spec_decode_num_accepted_tokens_total")
    steps = summed(BY_SIDE, "specmon_rounds_total")
    return f"({accepted} + {steps}) / {steps}"


def goodput(clock: str) -> str:
    """Σ decode tokens / Σ decode seconds on one clock: tok/s."""
    where = f'clock="{clock}", '
    tokens = summed(BY_SIDE, "specmon_decode_tokens_total", where)
    return f"{tokens} / {summed(BY_SIDE, 'specmon_decode_seconds_total', where)}"


def routed_now() -> str:
    """Each proxy's side for each class, as one number a value mapping names (ROUTES)."""
    sides = " or ".join(
        f'{number} * (specmon_route_side{{side="{side}", {PICKED}}} == 1)' for side, (number, _, _) in ROUTES.items()
    )
    return f"max by (instance, class) ({sides})"


def added_per_step(metric: str, by: str) -> str:
    """What a counter added over each step's window (its series are there at 0 from the start, so a first
    count, such as a class's first move, is seen)."""
    return f"sum by ({by}) (increase({metric}{{{PICKED}}}[{RATE}]))"


def routing_moves() -> str:
    return added_per_step("specmon_policy_decisions_total", "class, applied")


def sent_plain() -> str:
    """The share of requests answered plain; a class with none sent plain reads 0, not nothing."""
    plain = summed("class", "specmon_proxy_requests_total", 'side="plain", ')
    every = summed("class", "specmon_proxy_requests_total")
    return f"({plain} or 0 * {every}) / {every}"


def share_set() -> str:
    return f"avg by (class) (specmon_route_plain_share{{{PICKED}}})"


def requests_by_status() -> str:
    """Requests/s per upstream and status class (2xx, 5xx; status 0: no upstream answered)."""
    per_status = rate("specmon_proxy_requests_total")
    coded = f'label_replace({per_status}, "code", "${{1}}xx", "status", "([1-9])[0-9][0-9]")'
    unanswered = f'label_replace({coded}, "code", "unanswered", "status", "0")'
    return f"sum by (side, upstream, code) ({unanswered})"


def error_share() -> str:
    """Failed / all requests per upstream (499, a client that left, is no upstream's error); an upstream
    without errors reads 0."""
    errors = summed("side, upstream", "specmon_proxy_requests_total", 'status!~"2..|499", ')
    every = summed("side, upstream", "specmon_proxy_requests_total")
    return f"({errors} or 0 * {every}) / {every}"


def failovers() -> str:
    return added_per_step("specmon_failovers_total", "class, routed, side")


def upstreams_up() -> str:
    """0 where any proxy has the upstream marked down."""
    return 'min by (side, upstream) (specmon_upstream_up{instance=~"$instance"})'


def queries(*targets: tuple[str, str]) -> list[Dataquery]:
    """(expr, legend) pairs as Prometheus targets A, B, ..."""
    return [
        Dataquery().expr(expr).legend_format(legend).ref_id(chr(ord("A") + i)).range()
        for i, (expr, legend) in enumerate(targets)
    ]


def legend() -> VizLegendOptions:
    return (
        VizLegendOptions()
        .display_mode(common.LegendDisplayMode.LIST)
        .placement(common.LegendPlacement.BOTTOM)
        .show_legend(True)
        .calcs([])
    )


def tooltip() -> VizTooltipOptions:
    return VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI).sort(common.SortOrder.DESCENDING)


def timeseries(title: str, about: str, unit: str, targets: list[Dataquery], span: int):
    return (
        Timeseries()
        .title(title)
        .description(about)
        .datasource(DATASOURCE)
        .targets(targets)
        .unit(unit)
        .min(0)
        .span(span)
        .height(8)
        .legend(legend())
        .tooltip(tooltip())
        .line_width(2)
    )


def timeline(title: str, about: str, targets: list[Dataquery], states: dict[int, tuple[str, str]], span: int, h: int):
    """A state timeline whose numbers are named and coloured by `states` (number -> (text, colour))."""
    names = {str(n): dashboard.ValueMappingResult(text=text, color=colour) for n, (text, colour) in states.items()}
    return (
        StateTimeline()
        .title(title)
        .description(about)
        .datasource(DATASOURCE)
        .targets(targets)
        .mappings([dashboard.ValueMap(options=names)])
        .span(span)
        .height(h)
        .show_value(common.VisibilityMode.NEVER)
        .merge_values(True)
        .row_height(0.8)
        .legend(legend())
        .tooltip(tooltip())
    )


def variables() -> list:
    everything = dashboard.VariableOption(selected=True, text="All", value="$__all")
    picked = []
    for name, query in (("instance", INSTANCES), ("class", CLASSES)):
        picked.append(
            QueryVariable(name)
            .label(name)
            .datasource(DATASOURCE)
            .query(query)
            .multi(True)
            .include_all(True)
            .all_value(".*")  # one regex, not an alternation of every value
            .current(everything)
            .refresh(dashboard.VariableRefresh.ON_TIME_RANGE_CHANGED)  # a machine added later is listed
            .sort(dashboard.VariableSort.ALPHABETICAL_ASC)
        )
    return [DatasourceVariable("datasource").label("Prometheus").type("prometheus"), *picked]


def speculation_panels() -> list:
    by_side = "{{class}} {{side}}"
    return [
        timeseries(
            "Acceptance",
            "Draft tokens the target accepted / draft tokens proposed, per class and side",
            "percentunit",
            queries((acceptance(), by_side)),
            12,
        ),
        timeseries(
            "Tokens per step",
            "Tokens each target step emitted: (accepted + steps) / steps; 1.0 is no gain from drafting",
            "suffix: tok/step",
            queries((tokens_per_step(), by_side)),
            12,
        ),
    ]


def goodput_panels() -> list:
    by_side = "{{class}} {{side}}"
    return [
        timeseries(
            "Goodput, the server's clock",
            "Decode tokens / the server's own decode seconds, per class and side: each request's decode speed",
            "suffix: tok/s",
            queries((goodput("server"), by_side)),
            12,
        ),
        timeseries(
            "Goodput, the proxy's clock",
            "Decode tokens / the proxy's clock (a stream's first to last byte, a whole reply's arrival to last byte; "
            "proxy only): for upstreams that give no decode time",
            "suffix: tok/s",
            queries((goodput("proxy"), by_side)),
            12,
        ),
    ]


def routing_panels() -> list:
    states = {number: (text, colour) for number, text, colour in ROUTES.values()}
    return [
        timeline(
            "Routed now",
            "Where each proxy sends each class: alternating (learning), spec or plain; a change of colour is a move",
            queries((routed_now(), "{{class}} {{instance}}")),
            states,
            12,
            8,
        ),
        timeseries(
            "Routing moves",
            "Policy decisions over the rate interval (applied = false: advise mode)",
            "short",
            queries((routing_moves(), "{{class}} applied={{applied}}")),
            6,
        ),
        timeseries(
            "Share routed plain",
            "Requests answered plain / all requests, and the share each proxy sets now (avg over proxies)",
            "percentunit",
            queries((sent_plain(), "{{class}} sent"), (share_set(), "{{class}} set")),
            6,
        ),
    ]


def upstream_panels() -> list:
    return [
        timeseries(
            "Requests by upstream and status",
            "Requests/s per upstream that answered and HTTP status class (unanswered: no upstream did)",
            "reqps",
            queries((requests_by_status(), "{{side}} {{upstream}} {{code}}")),
            12,
        ),
        timeseries(
            "Error share",
            "Requests that failed (not 2xx; a client that left is not counted) / all requests, per upstream",
            "percentunit",
            queries((error_share(), "{{side}} {{upstream}}")),
            6,
        ),
        timeseries(
            "Failovers",
            "Requests the routed side's upstreams did not answer, answered by the other side, over the rate interval",
            "short",
            queries((failovers(), "{{class}} {{routed}} → {{side}}")),
            6,
        ),
        timeline(
            "Upstreams up",
            "Each upstream as the proxies see it: down where any proxy has it marked down",
            queries((upstreams_up(), "{{side}} {{upstream}}")),
            {1: ("up", "green"), 0: ("down", "red")},
            24,
            5,
        ),
    ]


def build() -> Dashboard:
    board = (
        Dashboard("specmon: speculative decoding")
        .uid("specmon")
        .description("Acceptance, goodput and routing per class, from specmon serve and specmon proxy")
        .tags(["specmon", "speculative-decoding"])
        .time("now-1h", "now")
        .refresh("30s")
        .timezone(common.TimeZoneBrowser)
        .tooltip(dashboard.DashboardCursorSync.CROSSHAIR)  # a move lines up with the figures it moved
        .variables(variables())
    )
    sections = (
        ("Speculation", speculation_panels()),
        ("Goodput", goodput_panels()),
        ("Routing (proxy)", routing_panels()),
        ("Upstreams (proxy)", upstream_panels()),
    )
    panel_id = 0
    for title, panels in sections:
        panel_id += 1
        board = board.with_row(Row(title).id(panel_id))
        for panel in panels:
            panel_id += 1
            board = board.with_panel(panel.id(panel_id))
    return board


def render() -> str:
    board = json.loads(JSONEncoder().encode(build().build()))
    for variable in board["templating"]["list"]:
        variable.pop("id", None)  # the SDK's all-zero default: Grafana 10 keys variables by a given id
    return json.dumps(board, sort_keys=True, indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 where the shipped file differs")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if OUT.exists() and OUT.read_text() == text:
            return 0
        print(f"{OUT} is not what scripts/dashboard.py writes: run it and commit the file", file=sys.stderr)
        return 1
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
