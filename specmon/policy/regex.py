"""Policy regexes run on RE2: matching takes time linear in the prompt's length, whatever the
pattern, so a class rule like `(a+)+$` cannot stall a run (Python's `re` backtracks)."""

from __future__ import annotations

import functools

import re2

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # the reason goes to `policy check`; RE2 would also print it to stderr


class RegexError(ValueError):
    """RE2 cannot compile the pattern (bad syntax, or a construct RE2 leaves out on purpose)."""


@functools.lru_cache(maxsize=512)  # classification runs once a prompt: compile each pattern once
def compile_regex(pattern: str):
    """The compiled RE2 pattern; RegexError says why RE2 refuses it."""
    try:
        return re2.compile(pattern, options=_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "cannot compile"
        reason = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
        raise RegexError(f"{reason} (policy regexes are RE2: no backreferences or lookaround)") from None
