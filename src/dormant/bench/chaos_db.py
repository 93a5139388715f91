"""What ``dormant bench chaos`` reads of its store from outside the workers.

The harness watches progress and leases while workers run, and the checker reads every
row it verifies, without going through a :class:`~dormant.runtime.Runtime` (a store of its
own would take part: claim, free dead owners' leases). :func:`open_chaos_db` picks the
reader by URL:

* SQLite: the file, read-only, a fresh connection per read (a reader never holds the
  file between polls); a read that fails (the file is locked or not created yet) is
  answered as "nothing yet";
* PostgreSQL: one psycopg connection (autocommit) on the run's schema; a read that fails
  reconnects once and, for the polls, answers "nothing yet".

The checker's reads (:meth:`ChaosDb.rows`) raise instead: a verdict is never made from
rows that could not be read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import apsw

#: Every leased thread with its lease token and the worker that holds it.
LEASED = "SELECT id, lease_token, lease_owner FROM threads WHERE lease_token IS NOT NULL"


class ChaosDb(Protocol):
    """Read-only access to a chaos run's store."""

    #: Least time between two progress/lease polls (each is a query).
    poll_s: float

    def rows(self, query: str) -> list[tuple[Any, ...]]:
        """The rows of ``query``; raises when the store cannot answer."""

    def progress(self) -> int:
        """Messages committed so far (0 before the schema exists or when unreadable)."""

    def leased(self) -> dict[str, tuple[str, str | None]]:
        """Thread id → (lease token, owner) of every leased thread ({} when unreadable)."""

    def integrity(self) -> list[str] | None:
        """What the database's own integrity check found ([] if nothing); None when the
        backend has no such check."""

    def close(self) -> None:
        """Release the connection, if one is held."""


class SqliteChaosDb:
    """A chaos run's SQLite file, read-only."""

    poll_s = 0.002

    def __init__(self, path: Path) -> None:
        self.path = path

    def rows(self, query: str) -> list[tuple[Any, ...]]:
        """The rows of ``query`` (raises ``apsw.Error``)."""
        conn = apsw.Connection(str(self.path), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            conn.setbusytimeout(1000)
            return [tuple(row) for row in conn.execute(query)]
        finally:
            conn.close()

    def _poll(self, query: str) -> list[tuple[Any, ...]]:
        if not self.path.exists():
            return []
        try:
            return self.rows(query)
        except apsw.Error:
            return []

    def progress(self) -> int:
        """The id of the newest message (ids only grow)."""
        rows = self._poll("SELECT max(id) FROM messages")
        return int(rows[0][0]) if rows and rows[0][0] is not None else 0

    def leased(self) -> dict[str, tuple[str, str | None]]:
        """Thread id → (lease token, owner) of every leased thread."""
        return {str(i): (str(t), None if o is None else str(o)) for i, t, o in self._poll(LEASED)}

    def integrity(self) -> list[str] | None:
        """``PRAGMA integrity_check`` and ``foreign_key_check``: what they found."""
        check = self.rows("PRAGMA integrity_check")
        fk = self.rows("PRAGMA foreign_key_check")
        problems = [] if check == [("ok",)] else [str(row) for row in check[:3]]
        return problems + [f"foreign key: {row}" for row in fk[:3]]

    def close(self) -> None:
        """Nothing to release: each read opens its own connection."""


class PostgresChaosDb:
    """A chaos run's PostgreSQL schema (the URL's search path), on one connection."""

    poll_s = 0.02

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn: Any = None

    def _connection(self) -> Any:
        import psycopg

        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.url, autocommit=True)
        return self._conn

    def rows(self, query: str) -> list[tuple[Any, ...]]:
        """The rows of ``query``; reconnects once if the connection broke (raises
        ``psycopg.Error`` if the server still cannot answer)."""
        import psycopg

        try:
            return [tuple(row) for row in self._connection().execute(query).fetchall()]
        except psycopg.OperationalError:
            self.close()
            return [tuple(row) for row in self._connection().execute(query).fetchall()]

    def _poll(self, query: str) -> list[tuple[Any, ...]]:
        import psycopg

        try:
            return self.rows(query)
        except psycopg.Error:  # the schema is not created yet, or the server is busy
            self.close()
            return []

    def progress(self) -> int:
        """How many messages there are (rows are never deleted during a run)."""
        rows = self._poll("SELECT count(*) FROM messages")
        return int(rows[0][0]) if rows else 0

    def leased(self) -> dict[str, tuple[str, str | None]]:
        """Thread id → (lease token, owner) of every leased thread."""
        return {str(i): (str(t), None if o is None else str(o)) for i, t, o in self._poll(LEASED)}

    def integrity(self) -> list[str] | None:
        """None: PostgreSQL checks its constraints as it writes; there is no cheap full check."""
        return None

    def close(self) -> None:
        """Close the connection (the next read opens a new one)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def open_chaos_db(url: str) -> ChaosDb:
    """The reader of ``url`` (``sqlite:///path`` or ``postgresql://...``)."""
    if url.startswith("sqlite:///"):
        return SqliteChaosDb(Path(url.removeprefix("sqlite:///")))
    if url.startswith(("postgresql://", "postgres://")):
        return PostgresChaosDb(url)
    raise ValueError("the chaos bench runs on sqlite:///PATH or postgresql://... stores")
