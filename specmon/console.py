"""The command line's two consoles, shared by every `specmon` command module."""

from __future__ import annotations

import sys

from rich.console import Console

err = Console(stderr=True)
out = Console(width=None if sys.stdout.isatty() else 200)  # piped output is not cut to 80 columns
