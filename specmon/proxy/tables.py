"""The proxy's plain-terminal output (rich, not Textual): the line per request, the per-class table
and the advice, for `specmon proxy`'s end and for `log info` on a proxy log. Every figure is a
RequestTotals property (specmon.metrics.served) or the advice's estimate: one definition each."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from specmon.cli.tables import compact_table
from specmon.errors import SpecmonError
from specmon.events.schema import RequestTimed, SessionStarted
from specmon.metrics.format import count, fmt
from specmon.metrics.served import RequestTotals, by_class
from specmon.policy.schema import Policy, parse_policy
from specmon.proxy.advice import NOT_APPLIED, ClassAdvice, advise

# decode tok/s: each request's own speed (its timings), not the server's throughput (a watch's tok/s)
COLUMNS = ("class", "upstream", "requests", "drafted", "accepted", "acceptance", "tok/step", "decode tok/s")
OUTCOMES = {499: "client left", 502: "upstream broke off", 0: "upstream unreachable"}


def request_line(ev: RequestTimed) -> str:
    """One request, as the headless proxy prints it."""
    totals = RequestTotals() + ev
    drafted = "-" if ev.draft_n is None else f"{ev.draft_n_accepted or 0}/{ev.draft_n}"
    speed = "-" if totals.tok_per_s is None else f"{totals.tok_per_s:.1f}"
    return (
        f"{ev.status} {ev.endpoint} {ev.request_id} class={ev.prompt_class} upstream={ev.upstream} "
        f"accepted/drafted={drafted} tokens={ev.predicted_n if ev.predicted_n is not None else '-'} "
        f"{speed} tok/s first byte {_ms(ev.first_byte_ms)}, total {_ms(ev.total_ms)}"
        + (" (stream)" if ev.stream else "")
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def class_table(events: Iterable[RequestTimed], title: str = "requests per class") -> Table:
    """A row per (class, upstream): the sums of its successful replies' timings and their ratios."""
    table = compact_table(escape(title), COLUMNS, left=("class", "upstream"))
    for (name, upstream), t in sorted(by_class(events).items()):
        table.add_row(
            escape(name),
            upstream,
            str(t.requests) if t.timed == t.requests else f"{t.requests} ({t.timed} timed)",
            str(t.draft_n),
            str(t.draft_n_accepted),
            fmt(t.acceptance),
            fmt(t.tokens_per_step),
            fmt(t.tok_per_s, "{:.1f}"),
        )
    return table


def uncounted_line(events: Iterable[RequestTimed]) -> str:
    """Requests left out of the table (no successful reply), by why; "" when there were none."""
    by_status = Counter(ev.status for ev in events if not 200 <= ev.status < 300)
    if not by_status:
        return ""
    parts = [f"{OUTCOMES.get(status, f'status {status}')} {n}" for status, n in sorted(by_status.items())]
    return f"requests not counted above: {', '.join(parts)}"


def advice_lines(advice: ClassAdvice, policy: Policy | None) -> list[str]:
    """The class, its spec/plain goodput ratio [95% interval] and both sides' requests; then the verdict
    and what would change."""
    est = advice.estimate
    ratio = "n/a" if est.ratio is None else f"{est.ratio:.2f}x"
    span = "" if est.low is None else f" [{est.low:.2f}, {est.high:.2f}]"
    sides = f"{advice.spec.timed} spec vs {count(advice.plain.timed, 'plain request')}"
    return [
        f"{advice.prompt_class}: spec/plain goodput {ratio}{span}, {sides}",
        f"  {advice.verdict}; change: {advice.change(policy)}",
    ]


def proxy_summary(events: Iterable, policy: Policy | None, title: str = "requests per class") -> Group:
    """The table, what it leaves out, and the advice per class: `specmon proxy`'s end and `log info`."""
    timed = [ev for ev in events if isinstance(ev, RequestTimed)]
    parts: list = [class_table(timed, title)]
    left_out = uncounted_line(timed)
    if left_out:
        parts.append(Text(left_out))
    advice = advise(timed)
    if advice:
        parts.append(Text("advice per class (95% intervals over requests):"))
        parts += [Text("  " + line) for a in advice for line in advice_lines(a, policy)]
        parts.append(Text(NOT_APPLIED))
    return Group(*parts)


def log_summary(events: Iterable) -> Group:
    """proxy_summary for a proxy log, under the policy its header recorded: what `log info` prints."""
    events = list(events)
    header = next((ev for ev in events if isinstance(ev, SessionStarted)), None)
    policy = None
    if header is not None and header.policy_text:
        try:
            policy = parse_policy(header.policy_text, "the log's policy")
        except SpecmonError:
            policy = None  # a policy this specmon no longer reads: the advice is still given, in general terms
    return proxy_summary(events, policy)
