"""`specmon bench verify`: the v(k) of the predicted speedup (metrics.predict), measured.

On a CPU, MKL's fp32 gemm reads the weights once per 3 rows, so without packing a 4-position verify
costs about twice a plain step; weights packed for `packed_rows` rows are read once for all rows."""

from __future__ import annotations

import msgspec
from rich.markup import escape
from rich.table import Table

from specmon.backends.profiles import DrafterSpec, load_profile
from specmon.console import err, out, progress
from specmon.cli.run import check_json, write_json
from specmon.engine.costs import time_passes
from specmon.metrics.format import fmt
from specmon.metrics.rates import ratio
from specmon.tables import figures_table


def cmd_bench_verify(args) -> int:
    check_json(args.json)
    profile = load_profile(args.profile)
    targets, pad_from = _load_targets(profile, args.packed_rows)
    with progress("timing verify passes", args.reps) as done:
        ms = time_passes(targets, args.context, args.reps, args.max_positions, done)
    costs = {name: {t: ratio(ms[name][t], ms[name][1]) for t in ms[name]} for name in ms}
    title = (
        f"verify pass cost: {profile.target.describe()} ({profile.backend}), "
        f"{args.context} tokens of context, least of {args.reps}"
    )
    out.print(verify_table(ms, costs, title))
    write_json(
        args.json,
        {
            "profile": profile.name,
            "context": args.context,
            "reps": args.reps,
            "layouts": {name: {"ms": ms[name], "cost": costs[name]} for name in ms},  # json writes T as a string
            "pad_from": pad_from,
        },
    )
    return 0


def _load_targets(profile, packed_rows: int) -> tuple[dict, int | None]:
    """The profile's target (torch: with plain kernels and with packed weights) and the packed one's pad_from."""
    from specmon.backends.loader import load_pair  # torch: only once every input is checked

    layouts = (("plain", 0), ("packed", packed_rows)) if profile.backend == "torch" else ((profile.backend, 0),)
    with err.status(escape(f"loading {profile.target.describe()}")):
        targets = {
            name: load_pair(msgspec.structs.replace(profile, packed_rows=rows), DrafterSpec(kind="none")).target
            for name, rows in layouts
        }
    packed = targets["packed"].model if "packed" in targets else None
    if packed is not None and not packed.packed_rows:
        err.print("this torch or profile cannot pack weights (MKL, fp32 on the CPU): packed = plain")
    elif packed is not None:
        err.print(
            f"packed: passes of {packed.pad_from}..{packed_rows} positions run as {packed_rows} rows "
            "(pad_from measured at load)"
        )
    return targets, packed.pad_from if packed is not None and packed.packed_rows else None


def verify_table(ms: dict, costs: dict, title: str) -> Table:
    caption = (
        "v(k) = ms of a pass over T positions (with what it costs the plain step after it) / ms of "
        "a one-position plain step"
    )
    table = figures_table(
        title, ["T (k = T-1)", *(f"{name} {what}" for name in ms for what in ("ms", "v(k)"))], caption
    )
    for t in next(iter(ms.values())):
        table.add_row(
            f"{t} (k={t - 1})", *(cell for name in ms for cell in (f"{ms[name][t]:.1f}", fmt(costs[name][t])))
        )
    return table
