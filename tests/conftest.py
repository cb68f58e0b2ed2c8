"""Shared test setup: never reach for the network, and quiet TensorFlow."""

import os

os.environ["COURSE_OFFLINE"] = "1"
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest  # noqa: E402

from helpers.logs import import_tensorflow  # noqa: E402


@pytest.fixture(scope="session")
def tf():
    """TensorFlow, imported quietly."""
    return import_tensorflow()
