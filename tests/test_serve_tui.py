"""The requests pane on a live server: the tiny model served on loopback, its session's view feeding
the real app (as `specmon serve` in a terminal does), rounds released one at a time so every state
is reached by order, never by timing; then every figure the pane showed is checked against the log."""

from __future__ import annotations

import re
import threading
from contextlib import contextmanager

from specmon.events.schema import PromptStarted, QueueSample, RoundVerified
from specmon.policy.schema import load_policy
from specmon.server.runner import ServeOptions, Serving
from specmon.transport.session import live_session
from specmon.tui.factory import make_app
from specmon.tui.feed import Feed
from specmon.tui.requests import seconds, short_id
from test_serve import client, events, wait_until
from test_serve_queue import stepped_rounds
from test_tui_requests import inside, ttft_foot, ttft_from_log
from test_tui_view import region_lines
from waiting import shown_until

MAX_TOKENS = 12


@contextmanager
def watched_server(tmp_path, tiny, lines: list[str]):
    """A server under the shipped policy, and the app over its session's view; yields (server, app, log)."""
    profile, pair = tiny
    log, policy = tmp_path / "serve.specmon", load_policy("default")
    with live_session(
        pair, profile, log, serve=False, policy=policy, announce=False, keep_events=False, viewer=True
    ) as session:
        server = Serving(session, pair, profile, ServeOptions(port=0, line=lines.append), policy)
        server.start()
        try:
            yield server, make_app(Feed(session.view, "serve")), log
        finally:
            server.stop()


def ask(server, answers: dict, name: str) -> threading.Thread:
    def send() -> None:
        question = [{"role": "user", "content": f"Question {name}: why is the sky blue?"}]
        answers[name] = client(server).chat.completions.create(model="t", messages=question, max_tokens=MAX_TOKENS)

    thread = threading.Thread(target=send)
    thread.start()
    return thread


async def test_the_live_pane_shows_the_queue_the_request_and_ttft_as_the_log_records_them(tmp_path, tiny):
    _, pair = tiny
    lines, answers = [], {}
    with watched_server(tmp_path, tiny, lines) as (server, app, log), stepped_rounds(pair) as steps:
        worker = server.worker
        async with app.run_test(size=(80, 24)) as pilot:
            await shown_until(
                pilot, lambda: app.state.requests is not None, "the server's first QueueSample", timeout=60
            )
            assert inside(region_lines(app, "requests")[1]) == "idle, 0 requests served"
            threads = [ask(server, answers, "a")]
            wait_until(lambda: worker.in_flight is not None, "a decoding, held at its first round")
            first = worker.in_flight
            for name in ("b", "c"):
                threads.append(ask(server, answers, name))
                wait_until(lambda: len(worker.waiting) == len(threads) - 1, f"{name} queued")
            steps.release()  # a's first round: the queue's growth is written at its end
            await shown_until(pilot, lambda: app.state.requests.waiting == 2, "two requests waiting", timeout=60)
            busy = region_lines(app, "requests")
            steps.release(10_000)
            for thread in threads:
                thread.join()
            await shown_until(
                pilot,
                lambda: app.state.requests.served == 3 and app.state.requests.in_flight is None,
                "every request served",
                timeout=60,
            )
            idle = region_lines(app, "requests")
    logged = events(log)
    started = {e.prompt_id: e for e in logged if isinstance(e, PromptStarted)}
    assert list(started) == [answers[n].id for n in "abc"] and first.request.id == answers["a"].id
    grew = next(e for e in logged if isinstance(e, QueueSample) and e.waiting == 2)
    a_rounds = [e for e in logged[: logged.index(grew)] if isinstance(e, RoundVerified)]
    assert len(a_rounds) == 1 and grew.request_id == answers["a"].id and grew.endpoint == "chat"
    ttfts = [ttft_from_log(rid, logged) for rid in started]
    a, k = started[answers["a"].id], a_rounds[0].draft_len
    assert busy[0].startswith("╭─ requests · 2 waiting · 0 served ─")
    assert inside(busy[1]) == (
        f"▶ chat {short_id(a.prompt_id)} [{a.prompt_class}] {f'k={k}' if k else 'plain'} · "
        f"{len(a_rounds[0].emitted)}/{MAX_TOKENS} tok · {seconds(grew.t - grew.arrived)}"
    )
    assert busy[2].endswith(ttft_foot(ttfts[:1]))
    assert idle[0].startswith("╭─ requests · 0 waiting ─") and inside(idle[1]) == "idle, 3 requests served"
    assert idle[2].endswith(ttft_foot(ttfts))
    # the headless line's ttft is the same figure, from the same two times in the log
    headless = {line.split()[1]: re.search(r" ttft=(\d+)ms ", line)[1] for line in lines}
    assert headless == {short_id(rid): f"{ttft * 1e3:.0f}" for rid, ttft in zip(started, ttfts)}
