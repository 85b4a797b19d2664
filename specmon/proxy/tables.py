"""The proxy's plain-terminal output (rich, not Textual): the line per request, the per-class table
and the advice, for `specmon proxy`'s end and for `log info` on a proxy log. Every figure is a
RequestTotals property (specmon.metrics.served) or the advice's estimate: one definition each. A
figure no reply gave is said as such ("not reported", N/A), never as 0."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from rich.console import Group
from rich.markup import escape
from rich.table import Table

from specmon.console import Hanging
from specmon.server.records import millis, notice_text, short_id
from specmon.tables import compact_table
from specmon.errors import SpecmonError
from specmon.events.schema import RequestTimed, ServerScraped, SessionStarted
from specmon.metrics.format import MISSING, count, fmt, ratio_interval
from specmon.metrics.served import RequestTotals, by_class, requests_cell
from specmon.policy.schema import Policy, parse_policy
from specmon.proxy.advice import ClassAdvice, advise, applied_line
from specmon.metrics.unreported import SPEC, SessionLines, notices, silent

# tok/s: each request's own decode speed (the server's decode time), not the server's throughput (a watch's)
COLUMNS = ("class", "upstream", "requests", "drafted", "accepted", "acceptance", "tok/step", "tok/s")
OUTCOMES = {499: "client left", 502: "upstream broke off", 0: "upstream unreachable"}
NOT_REPORTED = "not reported"
CLOCKED = "*"  # marks a tok/s on the proxy's clock
CLOCK_NOTE = f"{CLOCKED} tok/s on the proxy's clock (tokens after the first / first to last byte of streams): the upstream gave no decode time"
LIVE_LINES = SessionLines()  # the headless proxy's: each silent upstream's notice is told once per session


def request_lines(
    ev: RequestTimed, told: SessionLines | None = LIVE_LINES, width: int | None = None, sides: bool = False
) -> list[str]:
    """One request as the headless proxy prints it: its record, then, where it leaves its upstream with a
    notice the line has not told this session (`told`: the view's and log info's fold), that notice,
    wrapped to `width` on lines of its own."""
    said = told.observe(ev) if told is not None else None
    return [request_line(ev, sides)] + ([notice_text(said, width)] if said else [])


def request_line(ev: RequestTimed, sides: bool = False) -> str:
    """`200 c676e3f6 chat acc=2/48 tokens=35 tok/s=30.5 total=1183ms`: status, short id, class, the
    upstream's side where the proxy has two (`sides`), accepted/drafted tokens (n/r: not reported, - on
    the plain side), tokens, decode tok/s, time to first byte (a stream's alone: a reply sent whole has
    it at its end) and in all."""
    totals = RequestTotals() + ev
    missing = "n/r" if silent(ev) else "-"  # the plain side is not meant to draft
    missing = "unmeasured" if ev.unmeasured else missing  # its figures were out of range: its notice says why
    drafted = missing if ev.draft_n is None else f"{ev.draft_n_accepted or 0}/{ev.draft_n}"
    fields = [str(ev.status), short_id(ev.request_id), ev.prompt_class]
    fields += [f"upstream={ev.upstream}"] if sides else []
    fields += [f"acc={drafted}", f"tokens={ev.predicted_n if ev.predicted_n is not None else '-'}"]
    fields += [f"tok/s={_speed(totals, '-')}"]
    fields += [f"ttfb={millis(ev.first_byte_ms)}"] if ev.stream else []
    return " ".join([*fields, f"total={millis(ev.total_ms)}"])


def _speed(t: RequestTotals, missing: str = MISSING) -> str:
    """The server's decode tok/s; else the proxy's clock, marked; else missing."""
    if t.tok_per_s is not None:
        return f"{t.tok_per_s:.1f}"
    return missing if t.clocked_tok_per_s is None else f"{t.clocked_tok_per_s:.1f}{CLOCKED}"


def class_table(events: Iterable[RequestTimed], title: str = "requests per class") -> Table:
    """A row per (class, upstream): the sums of what its successful replies said, and their ratios."""
    table = compact_table(escape(title), COLUMNS, left=("class", "upstream"), tight=True)  # fits 80 columns
    for (name, upstream), t in sorted(by_class(events).items()):
        told = t.reported > 0
        missing = NOT_REPORTED if upstream == SPEC else "-"  # the plain side is not meant to draft
        table.add_row(
            escape(name),
            upstream,
            requests_cell(t.requests, t.timed, t.reported),
            str(t.draft_n) if told else "-",
            str(t.draft_n_accepted) if told else "-",
            fmt(t.acceptance) if told else missing,
            fmt(t.tokens_per_step),
            _speed(t),
        )
    return table


def position_lines(events: Iterable[RequestTimed]) -> list[str]:
    """Acceptance by draft position per (class, upstream), where the replies gave histograms (vLLM)."""
    lines = []
    for (name, upstream), t in sorted(by_class(events).items()):
        if t.accepted_per_pos:
            rates = " ".join(fmt(r) for r in t.position_rates())
            lines.append(f"  {name} {upstream}: {rates} ({count(t.pos_steps, 'step')})")
    return ["acceptance by draft position (steps past position i / steps):", *lines] if lines else []


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
    sides = f"{advice.spec.timed} spec vs {count(advice.plain.timed, 'plain request')}"
    return [
        f"{advice.prompt_class}: spec/plain goodput {ratio_interval(est.ratio, est.low, est.high)}, {sides}",
        f"  {advice.verdict}; change: {advice.change(policy)}",
    ]


def proxy_summary(events: Iterable, policy: Policy | None) -> Group:
    """The table, what it leaves out, and the advice per class: `specmon proxy`'s end and `log info`.
    Reads of the upstream's /metrics among `events` tell a notice whether the upstream drafts."""
    events = list(events)
    timed = [ev for ev in events if isinstance(ev, RequestTimed)]
    reads = [ev for ev in events if isinstance(ev, ServerScraped)]
    lines = [Hanging(line) for line in position_lines(timed)]  # a wrapped line goes on under itself
    if any(t.timed == 0 and t.clocked_tok_per_s is not None for t in by_class(timed).values()):
        lines.append(Hanging(CLOCK_NOTE))
    lines += [Hanging(line) for line in [uncounted_line(timed), *notices(timed, reads)] if line]
    advice = advise(timed)
    if advice:
        lines.append(Hanging("advice per class (95% intervals over requests):"))
        for a in advice:  # a class's line goes on past its verdict line's indent, not level with it
            head, verdict = advice_lines(a, policy)
            lines += [Hanging("  " + head, 4), Hanging("  " + verdict)]
        lines.append(Hanging(applied_line(policy, advice)))
    return Group(class_table(timed), *lines)


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
