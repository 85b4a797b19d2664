"""SIGTERM and SIGHUP (a `kill`, a closed SSH terminal) end a session the way Ctrl-C does: the
decode stops, SessionFinished is written, the socket file is removed, the exit status says so."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

from specmon.hangup import detach_hung_up, watch_terminal

ENDING = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """Raised in the main thread by SIGTERM or SIGHUP; handled like Ctrl-C, exit 128 + signal."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def ending_signals() -> Iterator[None]:
    """While inside, SIGTERM/SIGHUP raise Terminated in the main thread; the old handlers come back after."""

    def handler(signum, frame) -> None:
        if signum == signal.SIGHUP:
            detach_hung_up()  # what is printed on the way out must not fail on a closed terminal (EIO)
        raise Terminated(signum)

    previous = {sig: signal.signal(sig, handler) for sig in ENDING}
    watching = threading.Event()
    watch_terminal(watching)  # a terminal that hangs up sends SIGHUP here too: the kernel signals only its leader
    try:
        yield
    finally:
        watching.set()
        for sig, old in previous.items():
            signal.signal(sig, old)
