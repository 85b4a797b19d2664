"""`specmon sweep`: parse the grid, load the pair, feed the sweep scheduler, print the tables."""

from __future__ import annotations

import math
from pathlib import Path

from specmon.backends.profiles import DrafterSpec, load_profile
from specmon.console import err, out, progress
from specmon.cli.run import load_saying
from specmon.data import read_shipped
from specmon.engine.draft_len import MAX_DRAFT_LEN
from specmon.engine.prompts import prompt_set
from specmon.errors import SpecmonError
from specmon.sched.bench import prompts_path
from specmon.events.schema import Sampling
from specmon.replay.sweep_report import cell_rows, suggest_policy, sweep_plots
from specmon.replay.sweep_tables import break_even_table, paths_note, results_table
from specmon.tables import Note, print_host_line
from specmon.textfile import check_new_log, read_user_text
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


def progress_title(cells: list, prompts: list) -> str:
    """The progress line's lead: cells as the tables count them (`cells` leave out the class), then what it counts."""
    classes = len({p.prompt_class for p in prompts})
    return f"sweep {classes * len(cells)} cells, decodes"


def parse_floats(text: str, flag: str) -> list[float]:
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
        for t in parse_floats(args.temperatures, "--temperatures")
        for p in parse_floats(args.top_ps, "--top-ps")
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
    pair = load_saying(profile, DrafterSpec(kind="none"))
    layers = profile.drafter.layers if args.layers is None else args.layers
    specs = [
        DrafterSpec(kind=name, layers=layers, ngram_sizes=profile.drafter.ngram_sizes, target=profile.drafter.target)
        for name in names
    ]
    drafters = {d.name: d for d in map(pair.make_drafter, specs)}  # keyed by the drafter's own name, e.g. "layerskip-4"
    cells = grid(list(drafters), ks, samplings)
    with live_session(pair, profile, args.log, serve=False, announce=False) as session:
        try:
            with progress(progress_title(cells, prompts), len(cells) * len(prompts)) as done:
                run_sweep(session.driver, drafters, prompts, cells, args.max_new_tokens, done)
        except KeyboardInterrupt:
            session.finish("interrupted")
            err.print("sweep interrupted: the tables cover the runs that finished")
    rows = cell_rows(session.events)
    out.print(results_table(rows, session.log_path.name))
    out.print(break_even_table(rows))
    plots = sweep_plots(rows, args.out or Path("reports") / f"{session.session_id}-sweep")
    out.print(paths_note(session.log_path, plots))
    print_host_line(session.events)
    if args.suggest_policy:
        given = args.suggest_policy.exists()
        base = read_user_text(args.suggest_policy, "--suggest-policy") if given else read_shipped("policies", "default")
        for name, what in suggest_policy(rows, base, args.suggest_policy, session.log_path.name).items():
            out.print(Note(f"suggested for {name}: {what}"))
    return 0
