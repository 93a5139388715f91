"""The PostgreSQL schema: ``schema.sql`` creates a new database, the numbered files of
``migrations/`` (``NNNN_name.sql``, NNNN = the version reached) bring older ones to
the same shape. The newest snapshot under ``tests/migration/schemas/postgres`` is
``schema.sql``; a migration file never changes once released.
"""

from __future__ import annotations

import re
from importlib import resources

import psycopg

from ...errors import SchemaError, UsageError
from . import sql
from .driver import Conn, translate

SCHEMA_VERSION = 2
_NAME = re.compile(r"(\d{4})_[a-z0-9_]+\.sql")


def schema_text() -> str:
    """The SQL that creates a new database at :data:`SCHEMA_VERSION`."""
    return resources.files(__package__).joinpath("schema.sql").read_text()


def migrations() -> list[tuple[int, str]]:
    """(version reached, SQL) of every file in ``migrations/``, in version order."""
    found: list[tuple[int, str]] = []
    for entry in resources.files(__package__).joinpath("migrations").iterdir():
        match = _NAME.fullmatch(entry.name)
        if match is None:
            if entry.name.endswith(".sql"):
                raise SchemaError(f"migration file {entry.name!r} is not named NNNN_name.sql")
            continue
        found.append((int(match.group(1)), entry.read_text()))
    return sorted(found)


async def migrate(conn: Conn, url: str) -> None:
    """Create or migrate the schema of the first schema of the search path of ``conn``.

    Several processes may open a new database at once: an advisory lock lets one
    create it. A newer schema is refused with :class:`SchemaError`.
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
            found = await conn.execute(sql.SCHEMA_EXISTS)
            if (await found.fetchone() or (None,))[0] is None:
                await conn.execute(schema_text().encode())
                await conn.execute(sql.SET_FIRST_VERSION, (SCHEMA_VERSION,))
                return
            row = await (await conn.execute(sql.SCHEMA_VERSION)).fetchone()
            version = int(row[0]) if row else 0
            if version > SCHEMA_VERSION:
                raise SchemaError(
                    f"database schema version {version} is newer than this dormant "
                    f"({SCHEMA_VERSION}); upgrade dormant to open {schema!r}"
                )
            for target, text in migrations():
                if version < target <= SCHEMA_VERSION:
                    await conn.execute(text.encode())
                    await conn.execute(sql.SET_VERSION, (target,))
                    version = target
            if version != SCHEMA_VERSION:
                raise SchemaError(
                    f"database schema version {version} of {schema!r} has no migration "
                    f"to version {SCHEMA_VERSION}"
                )
    except psycopg.Error as exc:
        raise translate(exc) from exc
