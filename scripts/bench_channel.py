#!/usr/bin/env python
"""Event channel throughput, and what it costs the decode loop.

1. Events encoded, framed and written to a session log per second (through Channel + LogSink).
2. The embedded model's plain decoding through the session driver, publishing to a channel with three
   subscribers (the log sink, a viewer buffer, and a client attached over the Unix socket) against
   the same loop with events dropped. Repetitions alternate so drift cancels.

    python scripts/bench_channel.py --events 200000 --tokens 64 --reps 6
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from specmon.transport.attach import attach_events
from specmon.transport.channel import Channel, LogSink
from specmon.events.schema import RoundVerified, Sampling, SessionFinished
from specmon.transport.serve import EventServer


def sample_round(i: int) -> RoundVerified:
    return RoundVerified(
        session_id="bench",
        t=time.time(),
        round_id=i,
        prompt_id="p",
        prompt_class="rewrite",
        round_index=i,
        draft_len=4,
        proposed=[101, 102, 103, 104],
        accepted=2,
        rejection_pos=2,
        emitted=[101, 102, 555],
        draft_ms=0.03,
        verify_ms=45.0,
        overhead_ms=0.4,
        target_probs=[0.9, 0.8, 0.1, 0.05],
        alpha_hat=0.46,
        margins=[3.1, 2.2, 0.7],
        sampling=Sampling(),
        mem_bytes=1 << 29,
    )


def throughput(n: int, tmp: Path) -> float:
    events = [sample_round(i) for i in range(n)]
    sink = LogSink(tmp / "throughput.specmon")
    channel = Channel(sink)
    start = time.perf_counter()
    for event in events:
        channel.publish(event)
    channel.close()  # waits until the writer thread has written and flushed everything
    return n / (time.perf_counter() - start)


def decode_times(tokens: int, reps: int, tmp: Path) -> list[tuple[float, float]]:
    from specmon.backends.loader import load_pair
    from specmon.engine.drafters import NoDrafter
    from specmon.engine.draft_len import FixedDraftLen
    from specmon.engine.driver import SessionDriver
    from specmon.engine.prompts import Prompt
    from specmon.backends.profiles import DrafterSpec, load_profile

    pair = load_pair(load_profile("smollm2-cpu"), DrafterSpec(kind="none"))
    pair.target.eos_id = -1  # always decode exactly `tokens`
    prompt = Prompt("p", "Write a short story about a lighthouse keeper.", "c")

    def one(emit) -> float:
        driver = SessionDriver("bench", pair.target, pair.tokenizer, emit, 0.0)  # a driver per emit path, no log
        return driver.decode(prompt, NoDrafter(), FixedDraftLen(0), Sampling(), tokens).run.decode_ms

    one(lambda e: None)  # warm-up
    pairs = []
    for rep in range(reps):
        sink = LogSink(tmp / f"decode-{rep}.specmon")
        channel = Channel(sink)
        viewer = channel.subscribe(maxlen=10_000)
        server = EventServer(sink, tmp / f"decode-{rep}.sock")
        received = []
        client = threading.Thread(target=lambda: received.extend(attach_events(str(server.unix_path))))
        client.start()
        order = ["bare", "channel"] if rep % 2 == 0 else ["channel", "bare"]
        times = {}
        spent = [0.0]

        def publish(event) -> None:
            start = time.perf_counter()
            channel.publish(event)
            spent[0] += time.perf_counter() - start

        for which in order:
            times[which] = one(publish if which == "channel" else (lambda e: None))
        times["publish"] = spent[0] * 1e3
        channel.publish(SessionFinished(session_id="bench", t=0.0, rounds=tokens, reason="done"))
        channel.close()
        client.join()
        server.close()
        sent = tokens + 2  # PromptStarted, a round per token, SessionFinished
        assert len(received) == sent and len(viewer.drain()) == sent
        pairs.append((times["bare"], times["channel"]))
        print(
            f"rep {rep}: no channel {times['bare']:.0f} ms, channel + 3 subscribers {times['channel']:.0f} ms, "
            f"of which inside publish() {times['publish']:.2f} ms ({100 * times['publish'] / times['channel']:.3f}%)",
            flush=True,
        )
    return pairs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--reps", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rate = throughput(args.events, Path(tmp))
        print(f"encoded, framed and written: {rate:,.0f} events/s ({args.events:,} round events)")
        pairs = decode_times(args.tokens, args.reps, Path(tmp))
    ratios = [channel / bare for bare, channel in pairs]
    print(
        f"decode loop with channel / without, median of {args.reps}: {statistics.median(ratios):.4f} "
        f"({100 * (statistics.median(ratios) - 1):+.2f}%)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
