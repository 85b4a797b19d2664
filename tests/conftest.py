import itertools
from pathlib import Path

import pytest

from specmon.backends import modelstore
from specmon.backends.profiles import load_profile

REPO = Path(__file__).resolve().parent.parent


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
