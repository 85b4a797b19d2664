"""How tests wait: on a condition, with a deadline that only stops a hang (never a timing assertion).

The one `sleep` in the tests is here, between looks at the state of another thread or process. A Textual
app under a Pilot is waited on from its own event loop: shown_until polls between turns of it, then waits
until the screen has settled."""

import subprocess
import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], what: str, timeout: float = 60.0, poll_s: float = 0.005) -> T:
    """condition()'s first truthy value; AssertionError naming `what` if `timeout` seconds pass first."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(poll_s)  # another thread or process changes what condition() looks at
    return value


def tmux_screen(session: str) -> str:
    """What a tmux session's pane shows now."""
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout


def wait_for_screen(
    session: str, shown: Callable[[str], object], what: str, timeout: float = 240.0, still: bool = False
) -> str:
    """The first screen of `session` for which shown(screen) is true; `still`: and the same on two looks
    in a row (a view that stops changing, drawn whole: a look can fall between two writes of one frame);
    on timeout, the failure shows the last."""
    last = [""]

    def showing() -> bool:
        screen, before = tmux_screen(session), last[0]
        last[0] = screen
        return bool(shown(screen)) and (not still or screen == before)

    try:
        wait_until(showing, what, timeout, poll_s=0.2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the screen:\n{last[0]}") from None
    return last[0]


# -- a Textual app under a Pilot: the same waits, from the app's own event loop ---------------------

POLL_S = 0.01  # between looks at an app's state: the app's timers and messages run meanwhile


def screen_lines(app) -> list[str]:
    """The terminal as a user sees it, line by line."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


async def settled(pilot, timeout: float = 30.0) -> None:
    """Until animations are done and a turn of the event loop (its pending messages, then a forced
    screen update) changes nothing on screen."""
    await pilot.wait_for_scheduled_animations()
    deadline = time.monotonic() + timeout
    shown = None
    while (now := screen_lines(pilot.app)) != shown:
        if time.monotonic() > deadline:
            raise AssertionError("never happened: the screen stopped changing")
        shown = now
        await pilot.pause()


async def shown_until(pilot, condition: Callable[[], T], what: str, timeout: float = 30.0) -> T:
    """condition()'s first truthy value, looked at between turns of the app's loop, once the screen has
    settled after it; AssertionError naming `what` if `timeout` seconds pass first."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        await pilot.pause(POLL_S)
    await settled(pilot)
    return value


async def drawn(app, pilot, events=None) -> None:
    """Until a specmon app has applied every one of `events` (without them: until its feed ended) and drawn it."""
    if events is None:  # _drawn_end: the app's last tick found the feed ended and nothing left to apply
        await shown_until(pilot, lambda: app.feed.done.is_set() and app._drawn_end, "the feed ended and drawn")
    else:
        await shown_until(pilot, lambda: app.state.events_seen >= len(events), f"{len(events)} events applied")


async def resized(pilot, width: int, height: int) -> None:
    """Resize the terminal and wait until the screen is drawn at the new size."""
    await pilot.resize_terminal(width, height)
    await shown_until(
        pilot,
        lambda: pilot.app.size == (width, height) and len(screen_lines(pilot.app)) == height,
        f"the screen drawn at {width}×{height}",
    )
