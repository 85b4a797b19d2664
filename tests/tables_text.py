"""Reading the per-class tables `log info`, `run` and `attach --headless` print back into cells."""

from __future__ import annotations

import re
from collections import defaultdict


def printed_rows(stdout: str) -> dict[tuple[str, str], dict[str, str]]:
    """log info's per-class tables, by (class, k) as printed: {column: cell}, both tables' columns
    (cells are apart by two spaces or more; a cell such as "95% CI" holds one)."""
    rows: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
    header = None
    for line in stdout.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if cells[:2] == ["class", "k"]:
            header = cells
        elif header and set(line.strip()) <= {"─"}:
            continue
        elif header and len(cells) == len(header):
            rows[(cells[0], cells[1])].update(zip(header, cells))
        else:
            header = None  # past the table
    return dict(rows)
