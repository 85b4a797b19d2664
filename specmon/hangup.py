"""A terminal that hangs up (a closed SSH connection, a killed tmux session) ends a command the way
SIGHUP does, even where the SIGHUP itself never reaches the process: the kernel sends it only to the
terminal's session leader, and a shell there may not pass it on.

Linux marks a hung-up terminal's open files for good: poll() says POLLHUP, read() gives EOF and
write() fails with EIO, so a command that goes on printing there fails at its next line."""

from __future__ import annotations

import os
import select
import signal
import stat
import threading

STDIO = (0, 1, 2)
WATCH_S = 0.5  # how often the headless watcher looks; a hang-up is seen within this


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


def watch_terminal(stop: threading.Event) -> None:
    """Until `stop` is set, a thread that on a hang-up detaches the terminal and sends this process SIGHUP."""
    if not any(os.isatty(fd) for fd in STDIO):  # False, not an error, for a closed descriptor
        return

    def watch() -> None:
        while not stop.wait(WATCH_S):
            if detach_hung_up():
                os.kill(os.getpid(), signal.SIGHUP)
                return

    threading.Thread(target=watch, name="specmon-hangup", daemon=True).start()
