"""--fresh and --retime: how a session uses what earlier ones learned on this engine (memory.store)."""

from __future__ import annotations

import argparse

from specmon.backends.identity import engine_key
from specmon.memory.store import Memory, state_dir


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
