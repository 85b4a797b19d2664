"""The one error type a user can meet; the CLI prints its message without a traceback."""


class SpecmonError(Exception):
    """A mistake a user can make or fix (bad profile, missing model, corrupt log).

    The message is one line that says what went wrong and what to do about it (the CLI wraps it
    at words to a terminal's width).
    """
