"""The proxy's plain-terminal output (rich, not Textual): the line per request, the per-class table
and the advice, for `specmon proxy`'s end and for `log info` on a proxy log. Every figure is a
RequestTotals property (specmon.metrics.served) or the advice's estimate: one definition each. A
figure no reply gave is said as such ("not reported", N/A), never as 0."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from rich.console import Group
from rich.markup import escape
from rich.table import Table

from specmon.text import Hanging
from specmon.server.records import millis, notice_text, short_id
from specmon.tables import compact_table
from specmon.errors import SpecmonError
from specmon.events.schema import RequestTimed, SessionStarted
from specmon.metrics.format import count, fmt, ratio_interval
from specmon.metrics.served import (
    CLOCK_WORDS,
    CLOCKED,
    PROXY_CLOCK,
    RequestTotals,
    judged_on,
    requests_cell,
    tok_per_s_text,
)
from specmon.policy.schema import Policy, parse_policy
from specmon.proxy.advice import advise, applied_line
from specmon.proxy.tally import WINDOW, Tally
from specmon.metrics.unreported import Silence, missing_counts

# tok/s: each request's own decode speed (the server's decode time), not the server's throughput (a watch's)
COLUMNS = ("class", "upstream", "requests", "drafted", "accepted", "acceptance", "tok/step", "tok/s")
OUTCOMES = {499: "client left", 502: "upstream broke off", 504: "upstream went silent", 0: "upstream unreachable"}
CLOCK_NOTE = (
    f"{CLOCKED} tok/s on the proxy's clock (a stream's tokens after the first / first to last byte; a whole reply's "
    "tokens / arrival to last byte): a reply of the class gave no decode time, so both its sides are judged on it"
)


def request_lines(ev: RequestTimed, told: Silence, width: int | None = None, sides: bool = False) -> list[str]:
    """One request as the headless proxy prints it: its record, then any notice of its upstream not told this
    session (`told`: the session's fold, as the view's and log info's), wrapped to `width` on lines of its own."""
    said = told.observe(ev)
    return [request_line(ev, sides)] + ([notice_text(said, width)] if said else [])


def request_line(ev: RequestTimed, sides: bool = False) -> str:
    """`200 c676e3f6 chat acc=2/48 tokens=35 tok/s=30.5 total=1183ms`; `upstream=` where the proxy has two sides,
    `ttfb=` a stream's alone (a reply sent whole has its first byte at its end)."""
    totals = RequestTotals() + ev
    on = judged_on(totals)  # the reply's own clock (metrics.served.timing)
    # figures out of range: its notice says why
    missing = "unmeasured" if ev.unmeasured else missing_counts(ev.upstream, answered=200 <= ev.status < 300)
    drafted = missing if ev.draft_n is None else f"{ev.draft_n_accepted or 0}/{ev.draft_n}"
    fields = [str(ev.status), short_id(ev.request_id), ev.prompt_class, *([f"upstream={ev.upstream}"] if sides else [])]
    fields += [f"acc={drafted}", f"tokens={ev.predicted_n if ev.predicted_n is not None else '-'}"]
    fields += [f"tok/s={tok_per_s_text(totals.tok_per_s_on(on), on, '-')}"]
    fields += [f"ttfb={millis(ev.first_byte_ms)}"] if ev.stream else []
    return " ".join([*fields, f"total={millis(ev.total_ms)}"])


def class_table(tally: Tally) -> Table:
    """A row per (class, upstream) of its successful replies' sums and ratios; tok/s on the class's clock."""
    table = compact_table("requests per class", COLUMNS, left=("class", "upstream"), tight=True)  # fits 80 columns
    for (name, upstream), t in sorted(tally.totals.items()):
        told, on = t.reported > 0, tally.clock(name)
        table.add_row(
            escape(name),
            upstream,
            requests_cell(t.requests, t.timed, t.reported),
            str(t.draft_n) if told else "-",
            str(t.draft_n_accepted) if told else "-",
            fmt(t.acceptance) if told else missing_counts(upstream, short=False),
            fmt(t.tokens_per_step),
            tok_per_s_text(t.tok_per_s_on(on), on),
        )
    return table


def tally_summary(tally: Tally, policy: Policy | None) -> Group:
    """The table, what it leaves out, and the advice per class: `specmon proxy`'s end and `log info`.
    Reads of the upstream's /metrics in the tally tell a notice whether the upstream drafts."""
    positions = [  # where the replies gave histograms (vLLM)
        f"  {name} {upstream}: {' '.join(fmt(r) for r in t.position_rates())} ({count(t.pos_steps, 'step')})"
        for (name, upstream), t in sorted(tally.totals.items())
        if t.accepted_per_pos
    ]
    lines = ["acceptance by draft position (steps past position i / steps):", *positions] if positions else []
    if any(tally.clock(name) == PROXY_CLOCK for name, _ in tally.totals):
        lines.append(CLOCK_NOTE)
    if tally.outcomes:  # the requests left out of the table (no successful reply), by why
        parts = [f"{OUTCOMES.get(status, f'status {status}')} {n}" for status, n in sorted(tally.outcomes.items())]
        lines.append(f"requests not counted above: {', '.join(parts)}")
    lines = [Hanging(line) for line in [*lines, *tally.silence.notices()] if line]  # wrapped, it goes on under itself
    advice = advise(tally)
    if advice:
        over = f"each side's last {WINDOW} requests" if tally.windowed else "requests"
        lines.append(Hanging(f"advice per class (95% intervals over {over}):"))
        for a in advice:  # the class, its spec/plain goodput [95% interval] and both sides' requests; the verdict
            est = a.estimate
            sides = f"{est.prompts_spec} spec vs {count(est.prompts_plain, 'plain request')}"
            on = f", on {CLOCK_WORDS[a.clock]}" if a.clock == PROXY_CLOCK else ""  # else the servers', as the table
            head = f"{a.prompt_class}: spec/plain goodput {ratio_interval(est.ratio, est.low, est.high)}, {sides}{on}"
            # a class's line goes on past its verdict line's indent, not level with it
            lines += [Hanging("  " + head, 4), Hanging(f"    {a.verdict}; change: {a.change(policy)}")]
        lines.append(Hanging(applied_line(policy, advice)))
    return Group(class_table(tally), *lines)


def log_summary(events: Iterable) -> Group:
    """tally_summary of a proxy log (read once, an event at a time), under the policy its header recorded."""
    tally, header = Tally(), None
    for ev in events:
        tally.add(ev)
        header = ev if header is None and isinstance(ev, SessionStarted) else header
    policy = None
    if header is not None and header.policy_text:
        # a policy this specmon no longer reads: the advice is still given, in general terms
        with contextlib.suppress(SpecmonError):
            policy = parse_policy(header.policy_text, "the log's policy")
    return tally_summary(tally, policy)
