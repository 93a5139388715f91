"""A batch whose connection breaks before COMMIT's answer (an immediate restart of the
server): its outcome is unknown, and its callers get ``StoreUnreachable`` (retried later,
never counted against a thread), not a plain ``StoreError`` (a slice failure)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import psycopg.errors
import pytest

from dormant.errors import RETRY_LATER, StoreUnreachable
from dormant.store.postgres.writer import Job, Writer, WriterLimits

#: what psycopg raised in the workers' logs when the server was restarted with -m immediate
LOST = "consuming input failed: server closed the connection unexpectedly"


class Cursor:
    description = None
    rowcount = 1


class BreakingConn:
    """A connection whose pipeline breaks at its sync, as the server goes away mid-COMMIT."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc
        self.broken = False
        self.closed = False
        self.statements: list[str] = []

    @asynccontextmanager
    async def pipeline(self) -> AsyncIterator[BreakingConn]:
        yield self
        self.broken = True
        raise self.exc

    async def execute(self, query: Any, params: Any = None) -> Any:
        if self.broken:
            raise psycopg.OperationalError("the connection is lost")
        self.statements.append(str(query))
        return Cursor()

    async def sync(self) -> None:
        pass

    async def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize(
    "exc",
    [
        psycopg.OperationalError(LOST),
        psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
        psycopg.errors.CrashShutdown("terminating connection because of crash of another server process"),
    ],
    ids=["closed", "admin_shutdown", "crash_shutdown"],
)
@pytest.mark.parametrize("size", [256, 512 * 1024], ids=["pipelined", "careful"])
async def test_a_commit_cut_by_a_lost_connection_is_retried_later(exc: Exception, size: int) -> None:
    conn = BreakingConn(exc)
    if size > 256:  # a big batch runs one statement at a time: the connection breaks at COMMIT

        async def execute(query: Any, params: Any = None) -> Any:
            if "COMMIT" in str(query):
                conn.broken = True
                raise exc
            conn.statements.append(str(query))
            return Cursor()

        conn.execute = execute  # type: ignore[method-assign]

    async def connect() -> Any:
        raise AssertionError("the writer reconnects only for the next batch")

    writer = Writer(conn, connect, "me", {"threads": "t", "outbox": "o"}, WriterLimits())  # type: ignore[arg-type]
    try:
        with pytest.raises(StoreUnreachable, match="outcome is unknown") as err:
            await writer.submit(Job("SELECT 1", (), lambda rows, n: n), size)
    finally:
        await writer.close()
    assert isinstance(err.value, RETRY_LATER) and err.value.__cause__ is exc
    assert conn.statements, "the batch reached the server before it broke"
