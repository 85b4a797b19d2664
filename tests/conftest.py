import itertools
import os
import time
from pathlib import Path

import pytest

from specmon.backends import modelstore
from specmon.backends.profiles import load_profile

REPO = Path(__file__).resolve().parent.parent
os.environ["TZ"] = "UTC"  # clock times on screen ("ended at 01:44:07") are the same on every machine
time.tzset()


for _size in ("COLUMNS", "LINES"):  # readline, once imported, exports the terminal's size below os.environ:
    os.environ.pop(_size, None)  # piped CLI output would then wrap at 80; tests that want a width set COLUMNS
    os.unsetenv(_size)


@pytest.fixture(scope="session", autouse=True)
def private_runtime_dir(tmp_path_factory):
    """Sessions the tests start (and kill) serve their sockets here, never in the user's own
    runtime directory, where `specmon attach` would find them."""
    old = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = str(tmp_path_factory.mktemp("runtime"))
    yield
    if old is None:
        os.environ.pop("XDG_RUNTIME_DIR")
    else:
        os.environ["XDG_RUNTIME_DIR"] = old


@pytest.fixture(autouse=True)
def private_state_dir(tmp_path_factory, monkeypatch):
    """Each test's memory store (memory.store) is its own: what one test's sessions learned never
    starts another's warm, and the user's own store is never read or written."""
    monkeypatch.setenv("SPECMON_STATE", str(tmp_path_factory.mktemp("state")))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(profile, pair) of the tiny model, for the serve tests; sessions take turns with it."""
    from specmon.backends.loader import load_pair
    from tinymodel import tiny_profile

    profile = load_profile(str(tiny_profile(tmp_path_factory.mktemp("tiny"), max_new_tokens=32)))
    return profile, load_pair(profile)


@pytest.fixture(scope="session")
def model_path() -> Path:
    return modelstore.resolve(modelstore.SMOLLM2.name)


@pytest.fixture(scope="session")
def profile():
    return load_profile("smollm2-cpu")


@pytest.fixture(scope="session")
def pair(profile):
    from specmon.backends.loader import load_pair

    return load_pair(profile)


def collect():
    """An emit function plus the list it fills."""
    events = []
    return events, events.append


def round_ids():
    return itertools.count()


TINY_VERIFY_COSTS = (1.0, 1.2, 1.21, 1.21, 1.28, 1.28, 1.28, 1.31, 1.31)  # plain steps, T = 1..9


@pytest.fixture(scope="session")
def live_session(tmp_path_factory):
    """A real policy-driven session on the tiny model (the shipped policy, three passes over the
    built-in suite): its events as the live run held them, and its log, decided by today's rule on a
    pinned verify curve (timed under load, a flat curve made no decision and failed its users)."""
    from specmon.backends.loader import load_pair
    from specmon.backends.profiles import DrafterSpec
    from specmon.engine.prompts import builtin_suite
    from specmon.policy.engine import PolicyEngine
    from specmon.policy.schema import load_policy
    from specmon.sched.policy import PolicyScheduler
    from specmon.transport.session import live_session as open_session
    from tinymodel import tiny_profile

    tmp = tmp_path_factory.mktemp("live")
    policy_file = tmp / "policy.toml"
    policy_file.write_text((REPO / "policies" / "default.toml").read_text())
    profile_path = tiny_profile(tmp)
    # the tiny model's curve as a quiet host times it: its decisions must not hang on this host's load
    profile_path.write_text(f"verify_costs = {list(TINY_VERIFY_COSTS)}\n" + profile_path.read_text())
    profile = load_profile(str(profile_path))
    policy = load_policy(policy_file)
    pair = load_pair(profile, DrafterSpec(kind="ngram", draft_len=4))
    with open_session(pair, profile, tmp / "live.specmon", policy=policy, announce=False) as session:
        scheduler = PolicyScheduler(
            session.driver, PolicyEngine(policy, session.session_id, session.costs), pair.drafter
        )
        scheduler.run(builtin_suite() * 3, profile.sampling.to_event(), 24)
    return session
