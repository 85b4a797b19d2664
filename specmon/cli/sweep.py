"""`specmon sweep`: parse the grid, load the pair, feed the sweep scheduler, print the tables."""

from __future__ import annotations

import math
from pathlib import Path

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from specmon.backends.profiles import DrafterSpec, load_profile
from specmon.console import err, out, progress
from specmon.cli.run import check_new_log
from specmon.tables import VERDICT_MARKS, compact_table
from specmon.data import read_shipped
from specmon.engine.draft_len import MAX_DRAFT_LEN
from specmon.engine.prompts import prompt_set
from specmon.errors import SpecmonError
from specmon.sched.bench import prompts_path
from specmon.events.schema import Sampling
from specmon.metrics.contention import MARK_SHARE, tally
from specmon.metrics.format import fmt
from specmon.metrics.predict import MIN_ROUNDS, TOLERANCE
from specmon.replay.sweep_report import CellRow, cell_rows, sampling_label, suggest_policy, sweep_plots
from specmon.transport.session import live_session


def parse_ks(text: str) -> list[int]:
    try:
        if "-" in text:
            low, high = (int(x) for x in text.split("-"))
            if low > high:
                raise SpecmonError(f"--ks {text!r}: a range goes low to high, like {high}-{low}")
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
    samplings = [
        Sampling(t, p, 0, args.seed)
        for t in _floats(args.temperatures, "--temperatures")
        for p in _floats(args.top_ps, "--top-ps")
    ]
    if any(s.temperature < 0 or not 0 < s.top_p <= 1 for s in samplings):
        raise SpecmonError("sampling needs temperatures >= 0 and 0 < top-p <= 1")
    prompts = prompt_set(prompts_path(args.prompts), args.classes)
    names = [d.strip() for d in args.drafters.split(",") if d.strip()]
    unknown = [n for n in names if n not in ("ngram", "layerskip", "model")]
    if not names or unknown or ("model" in names and profile.drafter.target is None):
        raise SpecmonError(
            f"--drafters {args.drafters}: choose from ngram, layerskip, model "
            "(model needs a [drafter.target] in the profile)"
        )
    check_new_log(args.log)
    from specmon.backends.loader import load_pair  # torch takes a second: only once every input is checked

    with err.status("loading the model"):
        pair = load_pair(profile, DrafterSpec(kind="none"))
    layers = profile.drafter.layers if args.layers is None else args.layers
    specs = [
        DrafterSpec(kind=name, layers=layers, ngram_sizes=profile.drafter.ngram_sizes, target=profile.drafter.target)
        for name in names
    ]
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
    host = tally(session.events).line()
    if host:
        err.print(f"[yellow]{escape(host)}[/]")
    if args.suggest_policy:
        base = (
            _read_policy(args.suggest_policy) if args.suggest_policy.exists() else read_shipped("policies", "default")
        )
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


def results_table(rows: list[CellRow], log_name: str) -> Group:
    """Per cell, in 80 columns: acceptance, then speed against the prediction, then the cells
    whose prediction is not to be taken at its word."""
    acceptance = _table(
        escape(f"sweep {log_name}: acceptance per cell"),
        ("class", "drafter", "sampling", "k", "rounds", "empty", "rate", "mean", "α̂", "output"),
    )
    speed = _table(
        "measured speedup against predicted (gap = measured/predicted - 1)",
        ("class", "drafter", "sampling", "k", "draft", "verify", "tok/s", "speedup", "pred", "gap"),
    )
    flagged = []
    for r in rows:
        run, key = r.run, r.key
        cell = (escape(key.prompt_class), escape(key.drafter), sampling_label(key.sampling), str(key.draft_len))
        verdicts = ", ".join(f"{n} {v}" for v, n in sorted(run.verdicts.items())) or "-"
        acceptance.add_row(
            *cell,
            str(run.rounds),
            str(run.empty_rounds),
            fmt(run.acceptance_rate),
            fmt(run.mean_accepted_len),
            fmt(run.alpha_hat),
            verdicts,
        )
        gap = fmt(r.gap * 100 if r.gap is not None else None, "{:+.0f}%")
        speed.add_row(
            *cell,
            fmt(run.mean_ms(run.draft_ms)),
            fmt(run.mean_ms(run.verify_ms), "{:.1f}"),
            fmt(run.tok_per_s, "{:.1f}"),
            fmt(r.speedup, "{:.2f}×") + _busy(r),
            fmt(r.predicted, "{:.2f}×"),
            f"[yellow]{gap}[/]" if r.flag.startswith("off") else gap,
        )
        if r.flag:
            flagged.append(
                Text(
                    f"{key.prompt_class} {key.drafter} {sampling_label(key.sampling)} k={key.draft_len}: "
                    f"{r.flag} ({run.rounds} rounds)",
                    style="yellow" if r.flag.startswith("off") else "dim",
                )
            )
    legend = Text(
        f"empty: rounds that proposed nothing; draft, verify: ms per round; pred: the speedup the cell's "
        f"proposal mix, per-position acceptance and the sweep's verify cost per proposal length predict; "
        f"flagged below: cells under {MIN_ROUNDS} rounds, or more than {TOLERANCE:.0%} off; {BUSY_LEGEND}",
        style="dim",
    )
    return Group(acceptance, speed, legend, *flagged)


BUSY_LEGEND = f"~ busy host: {MARK_SHARE:.0%}+ of a cell's rounds and its plain cell's disturbed"


def _busy(row: CellRow) -> str:
    """The mark run and log info put beside a speedup measured on a busy host, or ''."""
    return VERDICT_MARKS["busy host"] if row.busy else ""


def _table(title: str, columns: tuple[str, ...]) -> Table:
    return compact_table(title, columns, left=("class", "drafter", "sampling", "output"))


def break_even_table(rows: list[CellRow]) -> Group:
    """Per class, drafter and k (greedy cells): the smallest acceptance at which a drafting round
    pays, from the costs of the rounds that drafted, beside the acceptance they measured."""
    table = _table(
        "break-even acceptance per k, on the rounds that drafted",
        ("class", "drafter", "k", "drafted", "break-even α", "measured", "pays"),
    )
    notes = []
    for r in rows:
        if not r.key.draft_len or not r.key.sampling.greedy:
            continue
        run = r.run
        rate, need = run.acceptance_rate, r.break_even
        pays = "-" if rate is None or r.c is None else "never" if need is None else "yes" if rate >= need else "no"
        if need is not None and r.drafting_cost <= 1.0:  # eq. 1's α = 0 already pays: 0.00 would hide why
            shown = "any"
            notes.append(_any_acceptance(r))
        else:
            shown = fmt(need)
        table.add_row(
            escape(r.key.prompt_class),
            escape(r.key.drafter),
            str(r.key.draft_len),
            f"{run.drafted_rounds}/{run.rounds}",
            shown + (_busy(r) if need is not None else ""),
            fmt(rate),
            pays,
        )
    legend = Text(
        "break-even: eq. 1 with every round proposing k, at the draft and verify cost the drafting rounds "
        "measured; measured: their acceptance (accepted/proposed); rounds that drafted nothing cost about "
        "a plain step and gain nothing, so a cell with few drafting rounds stays near plain whatever its "
        f"rate; never: even full acceptance does not pay; any: even zero acceptance pays; {BUSY_LEGEND}",
        style="dim",
    )
    return Group(table, legend, *notes)


def _any_acceptance(r: CellRow) -> Text:
    """Why a break-even is any acceptance, and why that is suspect."""
    k = r.key.draft_len
    return Text(
        f"{r.key.prompt_class} {r.key.drafter} k={k}: break-even at any acceptance: a drafting round cost "
        f"{r.drafting_cost:.2f} plain steps (verify {r.v:.2f}); a verify pass of {k + 1} tokens under one plain "
        "step means the plain steps were slowed (a busy host) or timer noise",
        style="yellow",
    )
