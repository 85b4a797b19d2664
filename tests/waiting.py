"""How tests wait: on a condition, with a deadline that only stops a hang (never a timing assertion).

The one `sleep` in the tests is here, between looks at the state of another thread or process."""

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


def wait_for_screen(session: str, shown: Callable[[str], object], what: str, timeout: float = 240.0) -> str:
    """The first screen of `session` for which shown(screen) is true; on timeout, the failure shows the last."""
    last = [""]

    def showing() -> bool:
        last[0] = tmux_screen(session)
        return bool(shown(last[0]))

    try:
        wait_until(showing, what, timeout, poll_s=0.2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the screen:\n{last[0]}") from None
    return last[0]
