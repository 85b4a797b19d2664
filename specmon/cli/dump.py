"""`specmon log dump LOG`: every event as one JSON object a line, for jq, pandas or a notebook."""

from __future__ import annotations

import sys

import msgspec

from specmon.console import print_error
from specmon.events.frames import LogDamaged
from specmon.events.log import read_log


def by_name(value):
    """An event as plain data with its fields by name (the log stores them as arrays), nested ones too."""
    if isinstance(value, msgspec.Struct):
        return {f: by_name(getattr(value, f)) for f in value.__struct_fields__}
    if isinstance(value, (list, tuple)):
        return [by_name(v) for v in value]
    if isinstance(value, dict):
        return {k: by_name(v) for k, v in value.items()}
    return value


def cmd_log_dump(args) -> int:
    """Write the log's events to stdout; a damaged log is dumped up to the damage, which is named on stderr."""
    stdout, count = sys.stdout.buffer, 0
    try:
        for event in read_log(args.log):
            # {"type": "RoundVerified", "session_id": ..., ...}: the event's type, then its fields in order
            stdout.write(msgspec.json.encode({"type": type(event).__name__, **by_name(event)}) + b"\n")
            count += 1
    except LogDamaged as exc:
        stdout.flush()
        print_error(f"{exc}; the {count} events before it were written")
        return 1
    except BrokenPipeError:  # `| head`: the reader has all it wanted
        sys.stderr.close()
        return 0
    stdout.flush()
    return 0
