#!/usr/bin/env python
"""Record tests/fixtures/session-serve.specmon: the embedded model served under the shipped policy,
a summary (class rewrite) decoding while three more (code-edit, chat, and a completion) wait behind
it. The requests pane's snapshot and tests replay this log; re-record it only when serve's events
change.

    python scripts/record_serve_fixture.py [OUT]
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import openai

from specmon.backends.loader import load_pair
from specmon.backends.profiles import load_profile
from specmon.policy.schema import load_policy
from specmon.server.runner import ServeOptions, Serving
from specmon.transport.session import live_session

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "session-serve.specmon"
FIRST = (
    "Summarize:\n\nThe quarterly meeting, first set for Thursday afternoon in the main conference room, "
    "has moved to Friday morning because several members of the engineering team are out sick this week."
)
QUEUED = [
    ("chat", "Add type hints to this function:\n```python\ndef add(a, b):\n    return a + b\n```"),
    ("chat", "Why is the sky blue?"),
    ("completion", "The three primary colours are"),
]


def until(condition, what: str) -> None:
    deadline = time.monotonic() + 120
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"never happened: {what}")
        time.sleep(0.005)


def ask(api: openai.OpenAI, endpoint: str, text: str) -> None:
    if endpoint == "chat":
        api.chat.completions.create(
            model="m", messages=[{"role": "user", "content": text}], max_tokens=48, temperature=0
        )
    else:
        api.completions.create(model="m", prompt=text, max_tokens=24, temperature=0)


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    out.unlink(missing_ok=True)
    profile, policy = load_profile("smollm2-cpu"), load_policy("default")
    pair = load_pair(profile)
    with live_session(pair, profile, out, serve=False, policy=policy, announce=False, keep_events=False) as session:
        server = Serving(session, pair, profile, ServeOptions(port=0), policy)
        server.start()
        api = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=600)
        threads = [threading.Thread(target=ask, args=(api, "chat", FIRST))]
        threads[0].start()
        until(lambda: server.worker.in_flight is not None, "the first request decoding")
        for endpoint, text in QUEUED:  # they arrive while the first decodes: the queue grows to 3
            threads.append(threading.Thread(target=ask, args=(api, endpoint, text)))
            threads[-1].start()
            until(lambda: len(server.worker.waiting) == len(threads) - 1, "the request queued")
        for thread in threads:
            thread.join()
        server.stop()
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
