"""What several commands share on their command lines: number types refused in one line naming the flag,
the model pair and prompt set, what earlier sessions learned, and a long session's log and how it rotates."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from specmon.backends.identity import engine_key
from specmon.backends.profiles import DEFAULT_PROFILE, MAX_INT
from specmon.memory.store import Memory, state_dir

DEFAULT_MAX_MB = 64.0  # a part that `log info` and `replay` read in seconds; weeks of a busy proxy in a few
MB = 1 << 20


def whole(low: int, high: int = MAX_INT, hint: str = ""):
    """An argparse type: an integer in low..high, refused in one line naming the flag (`hint`: what low means)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
        if not low <= value <= high:
            bounds = f"{low}..{high}" if high < MAX_INT or value > high else f">= {low}{hint}"
            raise argparse.ArgumentTypeError(f"must be {bounds}, not {value}")
        return value

    return parse


def finite(low: float, high: float = math.inf, *, above_low: bool = False):
    """An argparse type: a finite number (no nan, no inf) in [low, high] (or (low, high])."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, not {text!r}") from None
        if not math.isfinite(value) or value < low or (above_low and value == low) or value > high:
            bounds = f"{'>' if above_low else '>='} {low:g}" + (f" and <= {high:g}" if high < math.inf else "")
            raise argparse.ArgumentTypeError(f"must be a finite number {bounds}, not {text}")
        return value

    return parse


def add_profile(command, what: str) -> None:
    """--profile, its help `what` the profile is, then its default."""
    command.add_argument("--profile", default=DEFAULT_PROFILE, help=f"{what} (default: {DEFAULT_PROFILE})")


def add_inputs(command) -> None:
    """The model pair and the prompt set: the same three flags for run, sweep and bench."""
    add_profile(command, "a profile .toml path, or a name: the working directory's first, then the shipped profiles")
    command.add_argument(
        "--prompts",
        type=Path,
        help="JSON lines: id, prompt, optional class, max_new_tokens (default: the built-in suite)",
    )
    command.add_argument(
        "--classes",
        help="comma-separated classes to run: built-in ones, or with --prompts the file's own (default: all)",
    )


def add_memory_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="learn from nothing: ignore what earlier sessions on this engine, models and drafter learned "
        f"(kept under {state_dir() / 'memory'}; this session's learning still replaces it)",
    )
    parser.add_argument(
        "--retime",
        action="store_true",
        help="time the engine's verify passes again, though this host's store holds them",
    )


def memory_options(args, profile, drafter_name: str, spec=None) -> dict:
    """live_session's memory and engine_key for this command's flags, profile and drafter."""
    return {
        "memory": Memory(fresh=args.fresh, retime=args.retime),
        "engine_key": engine_key(profile, drafter_name, spec),
    }


def add_log(parser: argparse.ArgumentParser) -> None:
    """--log, --log-max-mb and --log-keep (a long-running command's); main sets args.rotation from the last two."""
    parser.add_argument("--log", type=Path, help="session log path (default: logs/SESSION.specmon)")
    parser.add_argument(
        "--log-max-mb",
        type=max_mb,
        default=DEFAULT_MAX_MB,
        metavar="N|off",
        help="past N MB the log goes on in a new file under its name, the old part "
        "renamed LOG.1.specmon, LOG.2.specmon...; SIGUSR1 rotates too (default 64; off: only SIGUSR1)",
    )
    parser.add_argument(
        "--log-keep",
        type=whole(0, hint=" (0: keep only the live part)"),
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
