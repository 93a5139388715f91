"""The PostgreSQL backend without a server: URL handling, options, error translation."""

from __future__ import annotations

import psycopg
import psycopg.errors
import pytest
from psycopg_pool import PoolTimeout

from dormant.config import Settings
from dormant.errors import (
    DormantError,
    InvalidInput,
    LeaseLost,
    NotFound,
    Overloaded,
    SchemaError,
    StoreError,
    StoreFull,
    StoreLocked,
    StoreUnreachable,
    UsageError,
)
from dormant.store import open_store, store_options
from dormant.store.postgres import PostgresStore
from dormant.store.postgres.driver import translate
from dormant.store.postgres.embedded import with_schema
from dormant.store.postgres.heartbeat import DbClock


@pytest.mark.parametrize("url", ["postgresql://u@h/db", "postgres://u:p@h:5433/db?sslmode=require"])
def test_postgres_urls_open_a_postgres_store(url: str) -> None:
    store = open_store(url, pool_size=3)
    assert isinstance(store, PostgresStore) and store.url == url and store.pool_size == 3


def test_bad_postgres_options_are_usage_errors() -> None:
    with pytest.raises(UsageError):
        open_store("postgresql://u@h/db", pool_size=0)
    with pytest.raises(UsageError):
        PostgresStore("mysql://u@h/db")


async def test_a_store_that_is_not_open_refuses_work() -> None:
    store = PostgresStore("postgresql://u@h/db")
    with pytest.raises(StoreError, match="not open"):
        await store.get_thread("t")
    with pytest.raises(StoreError, match="not open"):
        await store.create_thread("t", "a")


def test_store_options_per_backend() -> None:
    settings = Settings.build(pg_pool_size=5, synchronous="FULL")
    pg = store_options("postgresql://u@h/db", settings)
    assert pg["pool_size"] == 5 and "synchronous" not in pg
    lite = store_options("sqlite:///x.db", settings)
    assert lite["synchronous"] == "FULL" and "pool_size" not in lite
    assert store_options("memory://", settings) == {  # memory:// is SQLite in memory
        "max_input_bytes": settings.max_input_bytes,
        "view_cache_bytes": settings.view_cache_bytes,
        "view_spill_bytes": settings.view_spill_bytes,
        "synchronous": "FULL",
    }


def test_with_schema_sets_the_search_path_and_keeps_other_options() -> None:
    url = with_schema("postgresql://u@h/db?sslmode=disable&options=-cwork_mem%3D8MB", "s1")
    assert url.startswith("postgresql://u@h/db?sslmode=disable&options=")
    assert "-cwork_mem%3D8MB%20-csearch_path%3Ds1" in url


def _error(cls: type[psycopg.Error], state: str = "", message: str = "boom") -> psycopg.Error:
    exc = cls(message)
    if state:
        exc.sqlstate = state
    return exc


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (_error(psycopg.errors.RaiseException, "DM001"), LeaseLost),
        (_error(psycopg.errors.RaiseException, "DM002"), NotFound),
        (_error(psycopg.errors.RaiseException, "DM003"), StoreError),
        (_error(psycopg.errors.DiskFull, "53100"), StoreFull),
        (_error(psycopg.errors.TooManyConnections, "53300"), Overloaded),
        (_error(psycopg.errors.DeadlockDetected, "40P01"), StoreLocked),
        (_error(psycopg.errors.SerializationFailure, "40001"), StoreLocked),
        (_error(psycopg.errors.LockNotAvailable, "55P03"), StoreLocked),
        (_error(psycopg.errors.UndefinedTable, "42P01"), SchemaError),
        (_error(psycopg.errors.ReadOnlySqlTransaction, "25006"), StoreError),
        (_error(psycopg.errors.AdminShutdown, "57P01"), StoreUnreachable),
        (_error(psycopg.OperationalError), StoreUnreachable),
        (_error(psycopg.OperationalError, "08006"), StoreUnreachable),
        (_error(psycopg.errors.UniqueViolation, "23505"), StoreError),
        (PoolTimeout("no connection"), Overloaded),
        (_error(psycopg.errors.UntranslatableCharacter, "22P05"), InvalidInput),  # \u0000 in jsonb
        (_error(psycopg.errors.CharacterNotInRepertoire, "22021"), InvalidInput),
        (
            _error(psycopg.DataError, message="PostgreSQL text fields cannot contain NUL (0x00) bytes"),
            InvalidInput,
        ),
        (_error(psycopg.DataError, "22003", "numeric value out of range"), StoreError),
    ],
)
def test_driver_errors_become_dormant_errors(exc: Exception, expected: type[DormantError]) -> None:
    new = translate(exc)
    assert type(new) is expected
    assert new.__cause__ is exc
    assert str(new)


def test_dormant_errors_and_others_pass_through() -> None:
    lost = LeaseLost("x")
    assert translate(lost) is lost
    other = ValueError("y")
    assert translate(other) is other


class _Rows:
    def __init__(self, value: float) -> None:
        self.value = value

    async def fetchone(self) -> tuple[float]:
        return (self.value,)


class _ServerClock:
    """A connection whose server clock answers ``DB_NOW`` with the next of ``answers``."""

    def __init__(self, answers: list[float]) -> None:
        self.answers = answers

    async def execute(self, query: str) -> _Rows:
        return _Rows(self.answers.pop(0))


async def test_the_database_clock_trusts_the_sample_with_the_shortest_round_trip() -> None:
    local = iter([0.0, 1.0, 2.0, 2.01, 3.0, 5.0])  # round trips of 1 s, 10 ms, 2 s
    clock = DbClock(local=lambda: next(local))
    server = _ServerClock([100.0, 102.1, 500.0])
    await clock.sync(server, samples=3)  # type: ignore[arg-type]
    assert clock.offset == pytest.approx(102.1 - 2.005)
    clock.local = lambda: 10.0
    assert clock() == pytest.approx(10.0 + 102.1 - 2.005)
