"""Textual's Linux driver, made to end the app when its terminal hangs up, as `q` does.

Textual 8 on a hung-up terminal (seen with gdb on a `specmon run` left by `tmux kill-session`): its input thread
takes EOF for piped input and selects again at once (a core at 100%); its writer thread dies on EIO, so the app's
next frames fill its queue and block the main thread for good; and the SIGCONT sent with the SIGHUP "resumes" an
app never suspended, starting a second input thread (or, once the app has ended, aborting with no event loop)."""

from __future__ import annotations

import os
import selectors
import signal
import sys
import threading
from codecs import getincrementaldecoder

from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver

from specmon.hangup import detach_hung_up

READ_BYTES = 4096
_UNSET = object()


class HangupDriver(LinuxDriver):
    """Ends the app on SIGHUP, on EOF or an error reading the terminal, and on EIO writing to it."""

    def __init__(self, app, **kwargs) -> None:
        super().__init__(app, **kwargs)
        self._file = _TerminalOut(sys.__stderr__, self.hung_up)  # Textual's writer thread writes here
        self._gone = False
        self._previous_hup: object = _UNSET  # the SIGHUP handler in force before the app (restored after it)

    def start_application_mode(self) -> None:
        if self._previous_hup is _UNSET and threading.current_thread() is threading.main_thread():
            self._previous_hup = signal.signal(signal.SIGHUP, lambda signum, frame: self.hung_up())
        super().start_application_mode()

    def stop_application_mode(self) -> None:
        super().stop_application_mode()
        if self._previous_hup is not _UNSET:
            signal.signal(signal.SIGHUP, self._previous_hup or signal.SIG_DFL)  # None: not set from Python
            self._previous_hup = _UNSET

    def close(self) -> None:
        super().close()
        for sig in (signal.SIGTSTP, signal.SIGCONT):  # Textual leaves its handlers behind the app
            signal.signal(sig, signal.SIG_DFL)

    def _sigcont_application(self, *_) -> None:
        if self._must_signal_resume:  # only an app that Ctrl-Z stopped resumes; a hang-up's SIGCONT is not one
            super()._sigcont_application()

    def hung_up(self) -> None:
        """The terminal is gone: stop reading it, print to /dev/null, exit as `q` does; safe from a thread or signal."""
        if self._gone:
            return
        self._gone = True
        detach_hung_up()
        if not self._loop.is_closed():  # Driver's own: the loop the app was started on
            self._loop.call_soon_threadsafe(self._app.exit)

    def run_input_thread(self) -> None:
        """Textual's read loop, except that EOF or an error on the terminal is a hang-up, not a reason to read again."""
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode
        with selectors.SelectSelector() as selector:
            selector.register(self.fileno, selectors.EVENT_READ)
            while not self.exit_event.is_set():
                if selector.select(0.1):
                    try:
                        data = os.read(self.fileno, READ_BYTES)
                    except OSError:
                        data = b""
                    if not data:
                        self.hung_up()
                        return
                    for event in parser.feed(decode(data)):
                        self.process_message(event)
                for event in parser.tick():
                    self.process_message(event)


class _TerminalOut:
    """The writer thread's file: a write the hung-up terminal refuses ends the app (not the thread, blocking it)."""

    def __init__(self, file, gone) -> None:
        self._file, self._gone = file, gone

    def write(self, text: str) -> None:
        self._guarded(self._file.write, text)

    def flush(self) -> None:
        self._guarded(self._file.flush)

    def _guarded(self, call, *args) -> None:
        try:
            call(*args)
        except (OSError, ValueError):
            self._gone()

    def fileno(self) -> int:
        return self._file.fileno()
