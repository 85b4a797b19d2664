"""The headless per-request record lines of `serve` and `proxy`: one line each, fitting 80 columns in the
common case, in fields a script can split (status, short id, class, then key=value); a notice about a
request goes after its record, on lines of its own."""

from __future__ import annotations

import sys

from specmon.console import NOTICE_WIDTH
from specmon.server.errors import for_terminal
from specmon.text import line_width, wrap


def short_id(request_id: str) -> str:
    """The start of the id's random part: chatcmpl-3f9a2b1c… → 3f9a2b1c."""
    return request_id.rpartition("-")[2][:8]  # enough to find it in a client's log or the session's


def millis(ms: float | None) -> str:
    """`184ms`: a time in a key=value field, with no blank inside; - where it is not known."""
    return "-" if ms is None else f"{ms:.0f}ms"


def notice_text(notice: str, width: int | None = None) -> str:
    """A notice or a message (a refused request) as one text for print_line (whose "specmon: " starts its first
    line), each line made safe for a terminal: wrapped at words under a hanging indent to `width` (default:
    80, or the terminal's where narrower), whole where stdout is piped (as records are)."""
    width = width or line_width(sys.stdout, most=NOTICE_WIDTH)
    if width is None:
        return for_terminal(notice)
    return "\n".join(for_terminal(line.plain) for line in wrap(notice, width, start=len("specmon: "), fold=False))
