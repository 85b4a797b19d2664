"""--log-max-mb and --log-keep: how a long-running session's log rotates (`proxy`, `watch`, `serve`)."""

from __future__ import annotations

import argparse
import math

from specmon.events.log import Rotation

DEFAULT_MAX_MB = 64.0  # a part that `log info` and `replay` read in seconds; weeks of a busy proxy in a few
MB = 1 << 20


def add_log_rotation(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-max-mb",
        type=max_mb,
        default=DEFAULT_MAX_MB,
        metavar="N|off",
        help="past N MB the log goes on in a new file under its name, the old part "
        "renamed LOG.1.specmon, LOG.2.specmon...; SIGUSR1 rotates too (default 64; off: "
        "only SIGUSR1)",
    )
    parser.add_argument(
        "--log-keep",
        type=keep,
        metavar="K",
        help="finished parts kept, the oldest removed past K (default: all)",
    )


def max_mb(text: str) -> float | None:
    """A positive, finite size in MB, or `off` (never by size: SIGUSR1 still rotates)."""
    if text.strip().lower() == "off":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size in MB or off, not {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a size in MB > 0 (or off), not {text}")
    return value


def keep(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of parts, not {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 (0: keep only the live part), not {value}")
    return value


def log_rotation(args: argparse.Namespace) -> Rotation:
    """The Rotation the flags ask for; the command's session rotates on SIGUSR1 whatever they say."""
    size = args.log_max_mb
    return Rotation(max_bytes=None if size is None else max(1, int(size * MB)), keep=args.log_keep)
