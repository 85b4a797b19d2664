"""The one error type a user can meet; the CLI prints its message without a traceback."""


class SpecmonError(Exception):
    """A mistake a user can make or fix (bad profile, missing model, corrupt log), said in one line with
    what to do; `whole`: the phrases the CLI's wrap keeps on one line (a time, a command to copy)."""

    def __init__(self, message: str, whole: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.whole = whole
