"""The PostgreSQL schema through the one runner (:mod:`dormant.store.migrations`):
``schema.sql`` creates a new database, ``migrations/NNNN_name.sql`` bring older ones
to the same shape. This module only supplies the runner's three database calls and
the lock that lets one of several processes opening a new database create it.
"""

from __future__ import annotations

import psycopg

from ...errors import UsageError
from ..migrations import Schema, load_schema, migrate
from . import sql
from .driver import Conn, translate

#: This package's snapshot and numbered migrations.
SCHEMA: Schema = load_schema(__package__)
SCHEMA_VERSION = SCHEMA.version


class _Database:
    """:class:`~dormant.store.migrations.MigrationDB` over a connection in a transaction."""

    def __init__(self, conn: Conn) -> None:
        self.conn = conn

    async def version(self) -> int | None:
        found = await (await self.conn.execute(sql.SCHEMA_EXISTS)).fetchone()
        if found is None or found[0] is None:
            return None
        row = await (await self.conn.execute(sql.SCHEMA_VERSION)).fetchone()
        return int(row[0]) if row else 0

    async def execute(self, script: str) -> None:
        await self.conn.execute(script.encode())  # bytes: a script of several statements

    async def set_version(self, version: int, *, new: bool) -> None:
        await self.conn.execute(sql.SET_FIRST_VERSION if new else sql.SET_VERSION, (version,))


async def migrate_schema(conn: Conn, url: str) -> str:
    """Create or migrate the first schema of the search path of ``conn`` (autocommit);
    returns the schema's name.

    UsageError when that schema does not exist; SchemaError for a newer one.
    """
    try:
        schema = (await (await conn.execute(sql.CURRENT_SCHEMA)).fetchone() or (None,))[0]
        if schema is None:
            raise UsageError(
                f"no schema of the search_path of {url!r} exists; create it first "
                "(CREATE SCHEMA ...) or fix the options=-csearch_path=... of the URL"
            )
        async with conn.transaction():
            await conn.execute(sql.SCHEMA_LOCK, (schema,))
            await migrate(_Database(conn), SCHEMA, where=repr(schema))
        return str(schema)
    except psycopg.Error as exc:
        raise translate(exc) from exc
