"""The store backends the contract suite runs against.

Every test in ``tests/contract`` takes the ``store`` fixture and so runs once per
entry of :data:`BACKENDS`. To add a backend, add one :class:`Backend` whose
``make`` builds an unopened store on a fresh database or schema for the test.
A backend that needs a server names the fixture that provides it (``needs``):
PostgreSQL takes ``pg_url``, a fresh schema, which skips when no server can be
had and fails instead under ``CI=true``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from dormant.store.base import Store
from dormant.store.postgres import PostgresStore
from dormant.store.sqlite import SQLiteStore
from tests.helpers import FakeClock

#: Builds an unopened store for one test. Called again with the same arguments, it
#: must reach the same data (that is how durability is tested).
StoreFactory = Callable[[Path, FakeClock], Store]


@dataclass(frozen=True)
class Backend:
    """One store implementation under contract."""

    name: str
    make: StoreFactory
    durable: bool  # survives close and reopen
    shared: bool  # several store objects (workers) can open the same database
    #: a fixture giving the server URL: ``make`` is then built by ``bind(url)`` per test
    needs: str | None = None
    bind: Callable[[str], StoreFactory] | None = None


def _ram(tmp_path: Path, clock: FakeClock) -> Store:
    return SQLiteStore("memory://", clock=clock)


def _sqlite(tmp_path: Path, clock: FakeClock) -> Store:
    return SQLiteStore(f"sqlite:///{tmp_path}/x.db", clock=clock)


def _unbound(tmp_path: Path, clock: FakeClock) -> Store:
    raise AssertionError("this backend's factory is built per test by the backend fixture")


def _postgres(url: str) -> StoreFactory:
    def make(tmp_path: Path, clock: FakeClock) -> Store:
        return PostgresStore(url, clock=clock, pool_size=2)

    return make


BACKENDS = [
    Backend("ram", _ram, durable=False, shared=False),
    Backend("sqlite", _sqlite, durable=True, shared=True),
    Backend("postgres", _unbound, durable=True, shared=True, needs="pg_url", bind=_postgres),
]


@pytest.fixture(params=BACKENDS, ids=lambda b: b.name)
def backend(request: pytest.FixtureRequest) -> Backend:
    """The backend under test (one run of each contract test per backend)."""
    chosen: Backend = request.param
    if chosen.needs is None or chosen.bind is None:
        return chosen
    return replace(chosen, make=chosen.bind(request.getfixturevalue(chosen.needs)))


@pytest.fixture
async def store(backend: Backend, tmp_path: Path, clock: FakeClock) -> AsyncIterator[Store]:
    """An opened, empty store of the backend under test, on the test's clock."""
    opened = backend.make(tmp_path, clock)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()
