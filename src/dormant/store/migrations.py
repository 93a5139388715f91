"""The one schema migration runner, for every backend.

A backend keeps, in its package (``dormant.store.<backend>``):

* ``schema.sql`` — the snapshot: the whole schema of a new database (the truth);
* ``migrations/NNNN_name.sql`` — one file per schema version ``NNNN`` reached from
  ``NNNN - 1`` (frozen once released). The newest number is the schema version.

The backend opens a transaction (taking whatever lock keeps two processes from
migrating at once) and hands :func:`migrate` a :class:`MigrationDB`: three tiny
callables over that transaction. ``tests/migration`` proves, per backend, that
migrating the oldest schema gives the snapshot.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Protocol

from ..errors import SchemaError

_FILE = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    """One numbered migration file: the schema version it reaches and its SQL."""

    version: int
    name: str
    sql: str


@dataclass(frozen=True, slots=True)
class Schema:
    """A backend's snapshot and migrations, as shipped in its package."""

    snapshot: str
    migrations: tuple[Migration, ...]

    @property
    def version(self) -> int:
        """The schema version of this dormant (the newest migration; 1 without any)."""
        return self.migrations[-1].version if self.migrations else 1


def load_schema(package: str) -> Schema:
    """``schema.sql`` and ``migrations/NNNN_*.sql`` of ``package``, in version order.

    Raises SchemaError when the numbering has a gap or a duplicate (a packaging bug).
    """
    root = resources.files(package)
    snapshot = root.joinpath("schema.sql").read_text(encoding="utf-8")
    found: list[Migration] = []
    folder = root.joinpath("migrations")
    if folder.is_dir():
        for entry in folder.iterdir():
            match = _FILE.match(entry.name)
            if match:
                found.append(Migration(int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    for before, after in itertools.pairwise(found):
        if after.version != before.version + 1:
            raise SchemaError(
                f"migrations of {package} are not numbered in sequence: {before.name}, {after.name}"
            )
    return Schema(snapshot=snapshot, migrations=tuple(found))


class MigrationDB(Protocol):
    """What :func:`migrate` needs of a database, inside the transaction the backend opened."""

    async def version(self) -> int | None:
        """The stored schema version; None for a new database (no ``schema_version`` table)."""
        ...

    async def execute(self, script: str) -> None:
        """Run a script of one or more statements in the open transaction."""
        ...

    async def set_version(self, version: int, *, new: bool) -> None:
        """Store ``version`` (``new``: the first row of a new database)."""
        ...


async def migrate(db: MigrationDB, schema: Schema, *, where: str) -> int:
    """Bring the database to ``schema.version``; returns the version it had (0: new).

    A new database gets the snapshot; an older one runs every newer migration in
    order. Raises SchemaError for a database newer than this dormant (``where`` names
    it in the message) or one no migration reaches. The caller commits, or rolls back
    on any exception.
    """
    version = await db.version()
    if version is None:
        await db.execute(schema.snapshot)
        await db.set_version(schema.version, new=True)
        return 0
    start = version
    if version > schema.version:
        raise SchemaError(
            f"database schema version {version} is newer than this dormant ({schema.version}); "
            f"upgrade dormant to open {where}"
        )
    for step in schema.migrations:
        if step.version > version:
            if step.version != version + 1:
                break
            await db.execute(step.sql)
            await db.set_version(step.version, new=False)
            version = step.version
    if version != schema.version:
        raise SchemaError(
            f"database schema version {version} of {where} has no migration to version {schema.version}"
        )
    return start
