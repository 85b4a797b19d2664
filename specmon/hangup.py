"""SIGTERM and SIGHUP (a `kill`, a closed SSH terminal) end a session the way Ctrl-C does: the decode
stops, SessionFinished is written, the socket file is removed, the exit status says so. A terminal that
hangs up ends a command so even where the SIGHUP never reaches the process: the kernel sends it only to
the terminal's session leader, and a shell there may not pass it on.

Linux marks a hung-up terminal's open files for good: poll() says POLLHUP, read() gives EOF and
write() fails with EIO, so a command that goes on printing there fails at its next line."""

from __future__ import annotations

import os
import select
import signal
import stat
import threading
from contextlib import contextmanager
from typing import Iterator

STDIO = (0, 1, 2)


def hung_up(fd: int) -> bool:
    """True if `fd` is a terminal (a character device) that has hung up; a pipe's closed end is not one."""
    try:
        if not stat.S_ISCHR(os.fstat(fd).st_mode):
            return False
        poller = select.poll()
        poller.register(fd, 0)  # no events asked for: POLLHUP and POLLERR are reported anyway
        return any(mask & (select.POLLHUP | select.POLLERR) for _, mask in poller.poll(0))
    except (OSError, ValueError):
        return False


def detach_hung_up() -> list[int]:
    """Point each standard descriptor whose terminal hung up at /dev/null (no EIO on the way out); returns them."""
    dead = [fd for fd in STDIO if hung_up(fd)]
    if dead:
        null = os.open(os.devnull, os.O_RDWR)
        try:
            for fd in dead:
                os.dup2(null, fd)
        finally:
            os.close(null)
    return dead


class Terminated(KeyboardInterrupt):
    """Raised in the main thread by SIGTERM or SIGHUP; handled like Ctrl-C, exit 128 + signal."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def ending_signals() -> Iterator[None]:
    """While inside, SIGTERM/SIGHUP raise Terminated in the main thread, as does a standard descriptor's
    terminal hanging up (a thread watches); the old handlers come back after."""

    def handler(signum, frame) -> None:
        if signum == signal.SIGHUP:
            detach_hung_up()  # what is printed on the way out must not fail on a closed terminal (EIO)
        raise Terminated(signum)

    def watch() -> None:  # the kernel signals only the terminal's session leader: this one may never hear
        while not watching.wait(0.5):  # a hang-up is seen within half a second
            if detach_hung_up():
                os.kill(os.getpid(), signal.SIGHUP)
                return

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    watching = threading.Event()
    if any(os.isatty(fd) for fd in STDIO):  # False, not an error, for a closed descriptor
        threading.Thread(target=watch, name="specmon-hangup", daemon=True).start()
    try:
        yield
    finally:
        watching.set()
        for sig, old in previous.items():
            signal.signal(sig, old)
