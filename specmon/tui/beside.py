"""The live view in the main thread, the work (`run`'s decode, a server, `watch`'s reads) on a thread beside it."""

from __future__ import annotations

import contextlib
import threading
from typing import Callable

from specmon.engine.driver import Cancelled
from specmon.errors import SpecmonError
from specmon.transport.channel import Subscription
from specmon.transport.session import LiveSession


def beside_view(
    view: Subscription,
    title: str,
    work: Callable[[], None],
    stop: Callable[[], None],
    thread_name: str,
    what: str,
    url: str = "",
    then: Callable[[BaseException | None], None] | None = None,
) -> BaseException | None:
    """Run `work` on a thread while the live view drains `view`; quitting it calls `stop` and joins the thread.
    `work`'s failure shows in the title at once and is returned; `then(failure)` runs on the thread after it."""
    from specmon.tui.factory import make_app
    from specmon.tui.feed import Feed

    feed = Feed(view, title, url)
    failed: list[BaseException] = []

    def attempt(call: Callable[[], None]) -> None:
        try:
            call()
        except BaseException as exc:
            if not failed:  # `then`'s failure counts only where `work` did not fail
                failed.append(exc)
                feed.error = str(exc) if isinstance(exc, SpecmonError) else f"{what} failed: {exc!r}"

    def beside() -> None:
        attempt(work)
        if then is not None:
            attempt(lambda: then(failed[0] if failed else None))
        feed.done.set()

    thread = threading.Thread(target=beside, name=thread_name)
    thread.start()
    try:
        make_app(feed).run()
    finally:
        stop()
        thread.join()
    return failed[0] if failed else None


def serve_under_tui(session, serving, title: str, what: str = "serving") -> None:
    """Serve on a thread under the live view; quitting it stops the server (OnThread.stop); a failure raises after."""
    url = f"{serving.url}/v1"
    failure = beside_view(session.view, title, serving.run, serving.stop, serving.thread_name, what, url)
    if failure is not None:
        raise failure


def decode_under_tui(session: LiveSession, work: Callable[[Callable[[int], None] | None], None], title: str) -> None:
    """Decode on a thread under the live view; quitting it stops after the round; its failure is raised after."""

    def decode() -> None:
        with contextlib.suppress(Cancelled):  # stopped between prompts: the session ends "interrupted"
            work(None)

    def finish(failure: BaseException | None) -> None:
        """The view and attached clients see the session end now; a stop cut the last prompt short."""
        session.finish("error" if failure else "interrupted" if session.driver.stopped else "done")

    failure = beside_view(session.view, title, decode, session.driver.stop, "specmon-decode", "decode", then=finish)
    if failure is not None:
        raise failure
