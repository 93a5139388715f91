"""Fixtures shared by every test layer. Nothing here touches the network."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from tests.helpers import FakeClock

# Property tests stay fast and deterministic enough for a 2-core CI box.
settings.register_profile(
    "dormant",
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dormant-ci", parent=settings.get_profile("dormant"), derandomize=True)
settings.load_profile("dormant-ci" if os.environ.get("CI") == "true" else "dormant")


@pytest.fixture
def clock() -> FakeClock:
    """A hand-moved clock, for stores built with ``clock=``."""
    return FakeClock()
