"""`specmon sweep`: parse the grid, load the pair, feed the sweep scheduler, print the tables."""

from __future__ import annotations

import math
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from specmon.backends.profiles import DrafterSpec, load_profile
from specmon.cli.console import err, out, progress
from specmon.data import read_shipped
from specmon.engine.draft_len import MAX_DRAFT_LEN
from specmon.engine.prompts import prompt_set
from specmon.errors import SpecmonError
from specmon.events.schema import Sampling
from specmon.metrics.format import fmt
from specmon.replay.sweep_report import CellRow, cell_rows, suggest_policy, sweep_plots
from specmon.transport.session import live_session


def parse_ks(text: str) -> list[int]:
    try:
        if "-" in text:
            low, high = (int(x) for x in text.split("-"))
            ks = list(range(low, high + 1))
        else:
            ks = [int(x) for x in text.split(",")]
    except ValueError:
        raise SpecmonError(f"--ks {text!r}: expected a range like 0-8 or a list like 2,4,6") from None
    if not ks or min(ks) < 0 or max(ks) > MAX_DRAFT_LEN:
        raise SpecmonError(f"--ks {text!r}: draft lengths must be 0..{MAX_DRAFT_LEN}")
    return sorted(set(ks) | {0})


def _floats(text: str, flag: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise SpecmonError(f"{flag} {text!r}: expected comma-separated numbers") from None
    if not all(map(math.isfinite, values)):
        raise SpecmonError(f"{flag} {text!r}: expected finite numbers (no nan or inf)")
    return values


def cmd_sweep(args) -> int:
    from specmon.sched.sweep import grid, run_sweep

    profile = load_profile(args.profile)
    ks = parse_ks(args.ks)
    samplings = [Sampling(t, p, 0, args.seed) for t in _floats(args.temperatures, "--temperatures")
                 for p in _floats(args.top_ps, "--top-ps")]
    if any(s.temperature < 0 or not 0 < s.top_p <= 1 for s in samplings):
        raise SpecmonError("sampling needs temperatures >= 0 and 0 < top-p <= 1")
    prompts = prompt_set(args.prompts, args.classes)
    names = [d.strip() for d in args.drafters.split(",") if d.strip()]
    unknown = [n for n in names if n not in ("ngram", "layerskip", "model")]
    if not names or unknown or ("model" in names and profile.drafter.target is None):
        raise SpecmonError(f"--drafters {args.drafters}: choose from ngram, layerskip, model "
                           "(model needs a [drafter.target] in the profile)")
    from specmon.backends.loader import load_pair  # torch takes a second: only once every input is checked

    with err.status("loading the model"):
        pair = load_pair(profile, DrafterSpec(kind="none"))
    layers = profile.drafter.layers if args.layers is None else args.layers
    specs = [DrafterSpec(kind=name, layers=layers,
                         ngram_sizes=profile.drafter.ngram_sizes, target=profile.drafter.target) for name in names]
    drafters = {d.name: d for d in map(pair.make_drafter, specs)}  # keyed by the drafter's own name, e.g. "layerskip-4"
    cells = grid(list(drafters), ks, samplings)
    with live_session(pair, profile, pair.drafter, args.log, serve=False, announce=False) as session:
        try:
            with progress(f"sweep {len(cells)} cells", len(cells) * len(prompts)) as done:
                run_sweep(session.driver, drafters, prompts, cells, args.max_new_tokens, done)
        except KeyboardInterrupt:
            session.finish("interrupted")
            err.print("sweep interrupted: the tables cover the runs that finished")
    rows = cell_rows(session.events)
    out.print(results_table(rows, session.log_path.name))
    out.print(break_even_table(rows))
    plots = sweep_plots(rows, args.out or Path("reports") / f"{session.session_id}-sweep")
    out.print(f"log: {session.log_path}  plots: {', '.join(str(p) for p in plots)}", highlight=False, markup=False)
    if args.suggest_policy:
        base = _read_policy(args.suggest_policy) if args.suggest_policy.exists() else read_shipped("policies", "default")
        for name, what in suggest_policy(rows, base, args.suggest_policy, session.log_path.name).items():
            out.print(f"suggested for {name}: {what}", highlight=False, markup=False)
    return 0


def _read_policy(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise SpecmonError(f"--suggest-policy {path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise SpecmonError(f"--suggest-policy {path}: not UTF-8 text; save it as UTF-8") from None


def results_table(rows: list[CellRow], log_name: str) -> Table:
    table = Table(title=escape(f"sweep {log_name}: measured against predicted (gap = measured/predicted - 1)"),
                  title_justify="left")
    for col in ("class", "drafter", "T", "top_p", "k", "rate", "mean", "a_i", "α̂", "draft ms", "verify ms",
                "tok/s", "speedup", "predicted", "gap", "c", "v(k)", "output"):
        table.add_column(col, justify="left" if col in ("class", "drafter", "a_i", "output") else "right")
    for r in rows:
        run, key = r.run, r.key
        verdicts = ", ".join(f"{n} {v}" for v, n in sorted(run.verdicts.items())) or "-"
        gap = r.gap
        gap_text = fmt(gap * 100 if gap is not None else None, "{:+.0f}%")
        if gap is not None and abs(gap) > 0.15:
            gap_text = f"[yellow]{gap_text}[/]"
        table.add_row(escape(key.prompt_class), escape(key.drafter), f"{key.sampling.temperature:g}",
                      f"{key.sampling.top_p:g}",
                      str(key.draft_len), fmt(run.acceptance_rate), fmt(run.mean_accepted_len),
                      " ".join(f"{a:.2f}" for a in run.per_position) or "-", fmt(run.alpha_hat),
                      fmt(run.mean_ms(run.draft_ms)), fmt(run.mean_ms(run.verify_ms)), fmt(run.tok_per_s, "{:.1f}"),
                      fmt(r.speedup, "{:.2f}×"), fmt(r.predicted, "{:.2f}×"), gap_text, fmt(r.c, "{:.3f}"),
                      fmt(r.v), verdicts)
    return table


def break_even_table(rows: list[CellRow]) -> Table:
    """Per class and drafter: the smallest acceptance at which each k pays, from the measured costs."""
    ks = sorted({r.key.draft_len for r in rows if r.key.draft_len})
    table = Table(title="break-even acceptance α per k (from measured c and v(k); '-' = cannot pay)",
                  title_justify="left")
    for col in ["class", "drafter", *(f"k={k}" for k in ks)]:
        table.add_column(col, justify="left" if col in ("class", "drafter") else "right")
    groups: dict[tuple, dict[int, CellRow]] = {}
    for r in rows:
        if r.key.draft_len and r.key.sampling.greedy:
            groups.setdefault((r.key.prompt_class, r.key.drafter), {})[r.key.draft_len] = r
    for (cls, drafter), by_k in groups.items():
        cells = [by_k.get(k) for k in ks]
        table.add_row(escape(cls), escape(drafter), *("-" if c is None or c.break_even is None else f"{c.break_even:.2f}"
                                      for c in cells))
    return table
