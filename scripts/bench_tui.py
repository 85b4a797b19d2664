#!/usr/bin/env python
"""Can the TUI keep up? A producer thread offers synthetic round events as fast as asked; the
app (headless, real Textual) drains and redraws on its timer. Prints events ingested per
second, redraws per second and the backlog over time (it must not grow).

    python scripts/bench_tui.py --rate 20000 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time

from specmon.transport.channel import Subscription
from specmon.events.schema import PromptStarted, RoundVerified, Sampling
from specmon.tui.factory import make_app
from specmon.tui.feed import Feed


def synthetic_round(i: int) -> RoundVerified:
    accepted = i % 5
    return RoundVerified(
        session_id="bench",
        t=float(i),
        round_id=i,
        prompt_id="p",
        prompt_class=("chat", "rewrite", "code")[i % 3],
        round_index=i,
        draft_len=4,
        proposed=[1, 2, 3, 4],
        accepted=min(accepted, 4),
        rejection_pos=accepted if accepted < 4 else None,
        emitted=[7] * (min(accepted, 4) + 1),
        draft_ms=0.03,
        verify_ms=40.0 + i % 7,
        overhead_ms=0.4,
        target_probs=[0.5] * 4,
        alpha_hat=0.6,
        margins=[1.0],
        sampling=Sampling(),
        mem_bytes=1 << 29,
        accepted_text=" word" * min(accepted, 4),
        final_text=" end",
    )


def synthetic_starts() -> list[PromptStarted]:
    """One endless prompt in each of three classes, for synthetic_round's rounds."""
    return [
        PromptStarted(
            session_id="bench",
            t=0.0,
            prompt_id="p",
            prompt_class=cls,
            draft_len=4,
            drafter="ngram",
            sampling=Sampling(),
            prompt_tokens=10,
            max_new_tokens=10**9,
        )
        for cls in ("chat", "rewrite", "code")
    ]


def produce(sub: Subscription, rate: int, seconds: float, stop: threading.Event) -> None:
    for started in synthetic_starts():
        sub.offer(started)
    start, sent = time.perf_counter(), 0
    while not stop.is_set() and time.perf_counter() - start < seconds:
        due = int((time.perf_counter() - start) * rate)
        while sent < due:
            sub.offer(synthetic_round(sent))
            sent += 1
        time.sleep(0.001)


async def run(rate: int, seconds: float) -> None:
    sub = Subscription(maxlen=1_000_000)  # big enough that a backlog would show, not be dropped
    app = make_app(Feed(sub, "bench"))
    stop = threading.Event()
    async with app.run_test(size=(160, 48)) as pilot:
        producer = threading.Thread(target=produce, args=(sub, rate, seconds, stop))
        producer.start()
        start = time.perf_counter()
        samples = []
        while producer.is_alive():
            await pilot.pause(1.0)
            samples.append((time.perf_counter() - start, app.state.rounds_seen, app.redraws, len(sub._buf)))
        stop.set()
    for t, rounds, redraws, backlog in samples:
        print(f"t={t:5.1f}s  ingested {rounds:>8} rounds  redraws {redraws:>4}  backlog {backlog:>6}")
    (t0, r0, d0, _), (t1, r1, d1, _) = samples[0], samples[-1]
    print(
        f"steady state: {(r1 - r0) / (t1 - t0):,.0f} events/s ingested, {(d1 - d0) / (t1 - t0):.1f} redraws/s, "
        f"backlog at the end {samples[-1][3]}, skipped {sub.skipped}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=20_000, help="events per second offered")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    asyncio.run(run(args.rate, args.seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
