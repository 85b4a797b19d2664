"""What a watch or proxy log says about served traffic, for `log info` and `report`: what the watched
server did over the session (totals summed run by run, restarts and failed reads counted) and the
proxied requests by class. The figures are specmon.metrics.served's, the same the live view and the
watch's lines show; here they are summed from a log and written in words."""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

from specmon.events.log import LogDamaged, read_log
from specmon.events.schema import RequestTimed, ServerScraped
from specmon.metrics import served
from specmon.metrics.format import clock, count, fmt, markdown_cell
from specmon.metrics.unreported import missing_counts, notices


def logged(log: Path) -> list:
    """The log's events up to any damage (log info says where that is)."""
    events: list = []
    with contextlib.suppress(LogDamaged):
        events.extend(read_log(log))
    return events


def positions(w: served.Window) -> str:
    """Acceptance at each draft position: drafts that got past it / drafts (a trailing run at 0 as one cell)."""
    return " ".join(served.position_cell_text(*cell) for cell in served.position_cells(w.position_rates())) or "-"


def figures(w: served.Window) -> str:
    """A window's figures, each over the window's drafts and seconds."""
    tok_s = "" if w.tokens_per_s is None else f"  {w.tokens_per_s:.1f} tok/s"
    return (
        f"drafts {w.drafts}  draft tokens {w.draft_tokens}  accepted {w.accepted}  acceptance {fmt(w.acceptance)}  "
        f"accepted/draft {fmt(w.accepted_per_draft)}  pos {positions(w)}  {fmt(w.drafts_per_s, '{:.1f}')} drafts/s"
        f"{tok_s}"
    )


def served_summary(log: Path) -> dict:
    """The served-traffic figures of a log, up to any damage."""
    events = logged(log)
    scrapes = [ev for ev in events if isinstance(ev, ServerScraped)]
    timed = [ev for ev in events if isinstance(ev, RequestTimed)]
    requests: dict[tuple[str, str], served.RequestTotals] = {}
    for ev in timed:
        served.add_request(requests, ev)
    failed = [s for s in scrapes if s.error or s.drafts is None]
    total = served.total(scrapes)
    # the clock each class is judged on (served.judged_on over all its sides), as log info and the pane take it
    clocks = {cls: served.judged_on(*(t for (c, _), t in requests.items() if c == cls)) for cls, _ in requests}
    return {
        "url": scrapes[0].url if scrapes else "",
        "kind": next((s.kind for s in scrapes if s.kind), ""),
        "reads": len(scrapes),
        "failed_reads": len(failed),
        "first_failure": f"{clock(failed[0].t)} {failed[0].error}" if failed else "",
        "restarts": max(len(served.runs(scrapes)) - 1, 0),
        "total": None if total is None else _window(total),
        "total_line": "" if total is None else f"{clock(total.start)}, {total.seconds:.0f} s: {figures(total)}",
        "classes": [_class_row(cls, upstream, t, clocks[cls]) for (cls, upstream), t in sorted(requests.items())],
        "unreported": notices(timed, scrapes),
    }


def _class_row(cls: str, upstream: str, t: served.RequestTotals, clock: str) -> dict:
    """One (class, upstream)'s sums and ratios, for JSON; None where no reply gave the figure."""
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
        "clock": clock,
    }


def _window(w: served.Window) -> dict:
    """A window's counts (all but its start) and ratios."""
    counts = {name: n for name, n in dataclasses.asdict(w).items() if name != "start"}
    ratios = {
        "acceptance": w.acceptance,
        "accepted_per_draft": w.accepted_per_draft,
        "position_rates": w.position_rates(),
    }
    return counts | {"accepted_per_pos": list(w.accepted_per_pos)} | ratios


def info_lines(s: dict) -> list[tuple[str, str]]:
    """log info's served-traffic lines, each a (label, value) that wraps under its value."""
    if not s["reads"]:
        return []
    what = f"{s['url']} ({s['kind'] or 'unknown'}), {count(s['reads'], 'read')}"
    span = f"{count(s['restarts'], 'restart')}, {count(s['failed_reads'], 'failed read')}"
    lines = [
        ("  served traffic   ", f"{what}: {span}"),
        ("  totals           ", s["total_line"] or "no two good reads: nothing to sum"),
    ]
    return lines + ([("  first failure    ", s["first_failure"])] if s["first_failure"] else [])


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
        if any(r["clock"] == served.PROXY_CLOCK for r in s["classes"]):
            lines += ["", "tok/s marked * is the proxy's clock (first to last byte of streams): no decode time given."]
        lines += ["", *s["unreported"]] if s["unreported"] else []
    return lines


def _markdown_row(r: dict) -> str:
    told = r["reported"] > 0
    on = r["clock"]
    speed = served.tok_per_s_text(r["tok_per_s"] if on == served.SERVER_CLOCK else r["clocked_tok_per_s"], on)
    return (
        f"| {markdown_cell(r['class'])} | {markdown_cell(r['upstream'])} | {served.requests_cell(r['requests'], r['timed'], r['reported'])} | {r['drafted'] if told else '-'} | "
        f"{r['accepted'] if told else '-'} | {fmt(r['acceptance']) if told else missing_counts(r['upstream'], short=False)} | "
        f"{fmt(r['tokens_per_step'])} | {' '.join(fmt(x) for x in r['position_rates']) or '-'} | {speed} |"
    )
