"""`log info` and `report` on a watch or proxy log: what the watched server did over the session (totals
summed run by run, restarts and failed reads counted) and the proxied requests by class. The figures are
specmon.metrics.served's, the same the live view and the watch's totals line show."""

from __future__ import annotations

from pathlib import Path


from specmon.events.log import LogDamaged, read_log
from specmon.events.schema import RequestTimed, ServerScraped
from specmon.metrics import served
from specmon.metrics.format import count, fmt
from specmon.proxy.unreported import notices
from specmon.watch.lines import clock, figures


def served_summary(log: Path) -> dict:
    """The served-traffic figures of a log (up to any damage: log info says where that is)."""
    scrapes: list[ServerScraped] = []
    requests: dict[tuple[str, str], served.RequestTotals] = {}
    timed: list[RequestTimed] = []
    try:
        for ev in read_log(log):
            if isinstance(ev, ServerScraped):
                scrapes.append(ev)
            elif isinstance(ev, RequestTimed):
                served.add_request(requests, ev)
                timed.append(ev)
    except LogDamaged:
        pass
    runs = served.runs(scrapes)
    failed = [s for s in scrapes if s.error or s.drafts is None]
    total = served.total(scrapes)
    return {
        "url": scrapes[0].url if scrapes else "",
        "kind": next((s.kind for s in scrapes if s.kind), ""),
        "reads": len(scrapes),
        "failed_reads": len(failed),
        "first_failure": f"{clock(failed[0].t)} {failed[0].error}" if failed else "",
        "restarts": max(len(runs) - 1, 0),
        "total": None if total is None else _window(total),
        "total_line": "" if total is None else f"{clock(total.start)}, {total.seconds:.0f} s: {figures(total)}",
        "classes": [_class_row(cls, upstream, t) for (cls, upstream), t in sorted(requests.items())],
        "unreported": notices(timed),
    }


def _class_row(cls: str, upstream: str, t: served.RequestTotals) -> dict:
    """One (class, upstream)'s sums and ratios; drafted and accepted are None where no reply reported them."""
    return {
        "class": cls,
        "upstream": upstream,
        "family": t.family,
        "requests": t.requests,
        "timed": t.timed,
        "reported": t.reported,
        "drafted": t.draft_n if t.reported else None,
        "accepted": t.draft_n_accepted if t.reported else None,
        "steps": t.spec_steps if t.counted_steps else None,
        "acceptance": t.acceptance,
        "tokens_per_step": t.tokens_per_step,
        "position_rates": t.position_rates(),
        "tok_per_s": t.tok_per_s,
        "clocked_tok_per_s": t.clocked_tok_per_s,  # the proxy's clock, where the server gave no decode time
    }


def _window(w: served.Window) -> dict:
    return {
        "seconds": w.seconds,
        "drafts": w.drafts,
        "draft_tokens": w.draft_tokens,
        "accepted": w.accepted,
        "accepted_per_pos": list(w.accepted_per_pos),
        "generation_tokens": w.generation_tokens,
        "acceptance": w.acceptance,
        "accepted_per_draft": w.accepted_per_draft,
        "position_rates": w.position_rates(),
    }


def print_served(out, log: Path) -> None:
    """log info's served-traffic section."""
    s = served_summary(log)
    if s["reads"]:
        what = f"{s['url']} ({s['kind'] or 'unknown'}), {count(s['reads'], 'read')}"
        span = f"{count(s['restarts'], 'restart')}, {count(s['failed_reads'], 'failed read')}"
        out.print(f"  served traffic   {what}: {span}", highlight=False, markup=False)
        out.print(
            f"  totals           {s['total_line'] or 'no two good reads: nothing to sum'}",
            highlight=False,
            markup=False,
        )
        if s["first_failure"]:
            out.print(f"  first failure    {s['first_failure']}", highlight=False, markup=False)
    if s["classes"]:  # the proxy's own table and advice: drafted and accepted sums, spec against plain
        from specmon.proxy.tables import log_summary

        out.print(log_summary(_events(log)))


def _events(log: Path) -> list:
    events = []
    try:
        events.extend(read_log(log))
    except LogDamaged:
        pass  # up to the damage, as the rest of log info
    return events


def markdown(s: dict) -> list[str]:
    """report.md's served-traffic section."""
    lines = ["", "## Served traffic", ""]
    if s["reads"]:
        lines.append(
            f"{s['url']} ({s['kind'] or 'unknown'}): {count(s['reads'], 'read')}, "
            f"{count(s['restarts'], 'restart')}, {count(s['failed_reads'], 'failed read')}."
        )
        lines += ["", f"Totals (summed run by run, no window spans a restart): {s['total_line'] or 'none'}."]
    if s["classes"]:
        lines += [
            "",
            "| class | upstream | requests | drafted | accepted | acceptance | tokens/step | by position | tok/s |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        lines += [_markdown_row(r) for r in s["classes"]]
        if any(r["tok_per_s"] is None and r["clocked_tok_per_s"] is not None for r in s["classes"]):
            lines += ["", "tok/s marked * is the proxy's clock (first to last byte of streams): no decode time given."]
        lines += ["", *s["unreported"]] if s["unreported"] else []
    return lines


def _markdown_row(r: dict) -> str:
    told = r["reported"] > 0
    speed = fmt(r["tok_per_s"], "{:.1f}")
    if r["tok_per_s"] is None and r["clocked_tok_per_s"] is not None:
        speed = f"{r['clocked_tok_per_s']:.1f}*"
    return (
        f"| {_cell(r['class'])} | {_cell(r['upstream'])} | {r['requests']} | {r['drafted'] if told else '-'} | "
        f"{r['accepted'] if told else '-'} | {fmt(r['acceptance']) if told else 'not reported'} | "
        f"{fmt(r['tokens_per_step'])} | {' '.join(fmt(x) for x in r['position_rates']) or '-'} | {speed} |"
    )


def _cell(text: str) -> str:
    """A name inside a Markdown table: `|` would end the cell."""
    return text.replace("|", r"\|")
