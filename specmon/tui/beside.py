"""The live view in the main thread while a server (`serve`'s or `proxy`'s) runs on a thread beside it."""

from __future__ import annotations

import threading

from specmon.errors import SpecmonError


def serve_under_tui(session, serving, title: str, what: str = "serving") -> None:
    """Serve on a thread while the live view (main thread) drains the session's view; quitting the view
    shuts the server down (`serve`: the decode in flight stops after its round; `proxy`: replies in
    flight get the grace to finish). `what` names a failure in the title."""
    from specmon.tui.factory import make_app
    from specmon.tui.feed import Feed

    feed = Feed(session.view, title)
    feed.url = f"{serving.url}/v1"
    failed: list[BaseException] = []

    def serve() -> None:
        try:
            serving.run()
        except BaseException as exc:
            failed.append(exc)
            feed.error = str(exc) if isinstance(exc, SpecmonError) else f"{what} failed: {exc!r}"
        finally:
            feed.done.set()

    thread = threading.Thread(target=serve, name=serving.thread_name)
    thread.start()
    try:
        make_app(feed).run()
    finally:
        serving.server.should_exit = True
        thread.join()
    if failed:
        raise failed[0]
