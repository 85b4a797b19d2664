#!/usr/bin/env python
"""A million-round log in the replay TUI: time to first frame, and memory as it plays through.

Writes a synthetic log (real frames, three classes, decisions), opens it in the real app
(headless), and prints the seconds until the first rounds are on screen and the process's
resident memory at points along the replay; memory must stay flat as the log gets longer.

    python scripts/bench_replay.py --rounds 1000000
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

from specmon.events.log import LogWriter
from specmon.events.schema import SessionStarted, encode
from specmon.replay.player import ReplayFeed
from specmon.telemetry.memory import rss_bytes
from specmon.tui.factory import make_app

sys.path.insert(0, str(Path(__file__).parent))
from bench_tui import synthetic_round, synthetic_starts  # noqa: E402


def write_log(path: Path, rounds: int) -> None:
    writer = LogWriter(path)  # the session's own writer: real frames, as a live run writes them
    header = SessionStarted(
        session_id="bench",
        t=0.0,
        specmon_version="bench",
        profile_name="bench",
        profile_text="",
        backend="torch",
        target="synthetic",
        drafter="ngram",
        dtype="float32",
        device="cpu",
    )
    writer.write_payloads([encode(ev) for ev in (header, *synthetic_starts())])
    for first in range(0, rounds, 10_000):
        writer.write_payloads([encode(synthetic_round(i)) for i in range(first, min(first + 10_000, rounds))])
    writer.close()


async def replay(path: Path, rounds: int) -> None:
    start = time.perf_counter()
    app = make_app(ReplayFeed(path, speed=0.0))
    async with app.run_test(size=(160, 48)) as pilot:
        while app.state.rounds_seen == 0:
            await pilot.pause(0.01)
        print(f"first rounds on screen after {time.perf_counter() - start:.2f} s (rss {rss_bytes() / 2**20:.0f} MiB)")
        marks = [rounds // 10, rounds // 2, rounds]
        while marks:
            await pilot.pause(0.25)
            if app.state.rounds_seen >= marks[0]:
                print(
                    f"{app.state.rounds_seen:>9} rounds replayed at {time.perf_counter() - start:6.1f} s, "
                    f"rss {rss_bytes() / 2**20:.0f} MiB"
                )
                marks.pop(0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.specmon"
        start = time.perf_counter()
        write_log(path, args.rounds)
        print(
            f"wrote {args.rounds:,} rounds ({path.stat().st_size / 2**20:.0f} MiB) in "
            f"{time.perf_counter() - start:.1f} s"
        )
        asyncio.run(replay(path, args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
