"""The work beside the live view (specmon/tui/beside.py): what the title says of a failure, which failure
comes back, that quitting the view stops the work, and how `run`'s decode ends its session. The app is a
stand-in that waits for the work to end (or quits at once), so no terminal is needed."""

import threading

import pytest

from specmon.engine.driver import Cancelled
from specmon.errors import SpecmonError
from specmon.transport.channel import Subscription
from specmon.tui import factory
from specmon.tui.beside import beside_view, decode_under_tui

shown = {}


class WaitingApp:
    """Stays open until the work has ended, then keeps what the view would show."""

    def __init__(self, feed):
        self.feed = feed

    def run(self):
        self.feed.done.wait(30)
        shown.update(title=self.feed.title, error=self.feed.error, url=self.feed.url)


class QuittingApp(WaitingApp):
    def run(self):  # the user quits before the work ends
        shown.update(title=self.feed.title, error=self.feed.error, url=self.feed.url)


@pytest.fixture
def app(monkeypatch):
    shown.clear()
    monkeypatch.setattr(factory, "make_app", WaitingApp)


def beside(work, then=None, stop=lambda: None):
    return beside_view(Subscription(8), "title", work, stop, "specmon-test", "reading", "http://h:1/v1", then)


def fails_with(exc):
    def work():
        raise exc

    return work


def test_a_failure_of_the_work_is_in_the_title_and_comes_back_after_the_view(app):
    boom = RuntimeError("boom")
    assert beside(fails_with(boom)) is boom
    assert shown == {"title": "title", "error": "reading failed: RuntimeError('boom')", "url": "http://h:1/v1"}


def test_a_project_error_is_shown_as_its_message(app):
    wrong = SpecmonError("the server said 401; pass --api-key-file")
    assert beside(fails_with(wrong)) is wrong
    assert shown["error"] == "the server said 401; pass --api-key-file"


def test_then_sees_the_work_failure_and_its_own_failure_counts_only_without_one(app):
    seen = []

    def then(failure):
        seen.append(failure)
        raise ValueError("finish failed")

    boom = RuntimeError("boom")
    assert beside(fails_with(boom), then) is boom and seen == [boom]
    after_fine = beside(lambda: None, then)
    assert isinstance(after_fine, ValueError) and seen == [boom, None]
    assert shown["error"] == "reading failed: ValueError('finish failed')"


def test_work_that_ends_well_returns_nothing_and_leaves_the_title_clean(app):
    assert beside(lambda: None) is None and shown["error"] is None


def test_quitting_the_view_stops_the_work_and_waits_for_it(monkeypatch):
    monkeypatch.setattr(factory, "make_app", QuittingApp)
    stopped, ended = threading.Event(), []

    def work():
        stopped.wait(30)
        ended.append("after the stop")

    assert beside(work, stop=stopped.set) is None
    assert stopped.is_set() and ended == ["after the stop"]  # joined: the work had ended before the return


class Driver:
    def __init__(self):
        self.stopped = False

    def stop(self):
        self.stopped = True


class Session:
    """What decode_under_tui uses of a live session: its view, its driver, and finish(reason)."""

    def __init__(self):
        self.view, self.driver, self.reasons = Subscription(8), Driver(), []

    def finish(self, reason):
        self.reasons.append(reason)


def test_the_decode_ends_its_session_done_interrupted_or_error(app):
    done = Session()
    decode_under_tui(done, lambda progress: None, "run")
    assert done.reasons == ["done"]

    cancelled = Session()

    def stopped_between_prompts(progress):
        cancelled.driver.stopped = True
        raise Cancelled

    decode_under_tui(cancelled, stopped_between_prompts, "run")
    assert cancelled.reasons == ["interrupted"] and shown["error"] is None

    broken = Session()
    with pytest.raises(ZeroDivisionError):
        decode_under_tui(broken, lambda progress: 1 / 0, "run")
    assert broken.reasons == ["error"] and shown["error"].startswith("decode failed: ZeroDivisionError(")
