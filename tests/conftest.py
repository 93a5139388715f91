"""Fixtures shared by every test layer. Nothing here touches the network (the
PostgreSQL server of ``pg_url`` is local: a Unix socket, or DORMANT_TEST_PG_DSN)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from tests.helpers import FakeClock
from tests.pg import PgServer, start_server, unavailable

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


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer | str]:
    """The session's PostgreSQL server (started on first use), or why there is none."""
    server = start_server()
    try:
        yield server
    finally:
        if isinstance(server, PgServer):
            server.stop()


@pytest.fixture
def pg(pg_server: PgServer | str) -> PgServer:
    """The PostgreSQL server; skips (fails under CI=true) when there is none."""
    if isinstance(pg_server, str):
        unavailable(pg_server)
    assert isinstance(pg_server, PgServer)
    return pg_server


@pytest.fixture
def pg_url(pg: PgServer, request: pytest.FixtureRequest) -> str:
    """A ``postgresql://`` URL of a fresh, empty schema for this test."""
    return pg.fresh_url(re.sub(r"\W+", "_", request.node.name))
