"""The live view in the main thread while the work (`run`'s decode, `serve`'s or `proxy`'s server, `watch`'s
reads) goes on a thread beside it: one helper, beside_view, for every front-end that opens the view on a
live session."""

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
    """Run `work` on a thread while the live view (main thread) drains `view`; quitting the view calls
    `stop` and waits for the thread. A failure of `work` is shown in the title at once (`what` names it)
    and returned once the view has closed. `then(failure)` runs on the thread after `work`; its own
    failure counts only where `work` did not fail."""
    from specmon.tui.factory import make_app
    from specmon.tui.feed import Feed

    feed = Feed(view, title, url)
    failed: list[BaseException] = []

    def fail(exc: BaseException) -> None:
        failed.append(exc)
        feed.error = str(exc) if isinstance(exc, SpecmonError) else f"{what} failed: {exc!r}"

    def beside() -> None:
        try:
            work()
        except BaseException as exc:
            fail(exc)
        finally:
            try:
                if then is not None:
                    then(failed[0] if failed else None)
            except BaseException as exc:
                if not failed:
                    fail(exc)
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
    """Serve on a thread while the live view drains the session's view; quitting the view shuts the server
    down (`serve`: the decode in flight stops after its round; `proxy`: replies in flight get the grace to
    finish). A failure of the server is raised once the view has closed."""

    def shut_down() -> None:
        serving.server.should_exit = True

    url = f"{serving.url}/v1"
    failure = beside_view(session.view, title, serving.run, shut_down, serving.thread_name, what, url)
    if failure is not None:
        raise failure


def decode_under_tui(session: LiveSession, work: Callable[[Callable[[int], None] | None], None], title: str) -> None:
    """Decode on a thread; the app (main thread) drains a bounded view of the channel. Quitting
    the app stops the decode after its round (the driver's stop); an error in the decode thread is raised here."""

    def decode() -> None:
        with contextlib.suppress(Cancelled):  # stopped between prompts: the session ends "interrupted"
            work(None)

    def finish(failure: BaseException | None) -> None:
        """The view and attached clients see the session end now; a stop cut the last prompt short."""
        session.finish("error" if failure else "interrupted" if session.driver.stopped else "done")

    failure = beside_view(session.view, title, decode, session.driver.stop, "specmon-decode", "decode", then=finish)
    if failure is not None:
        raise failure
