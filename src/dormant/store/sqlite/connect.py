"""Opening SQLite connections, translating apsw errors, migrating the schema.

A ``sqlite:///path`` URL opens a file in WAL mode; ``memory://`` opens a private
in-memory database (``:memory:``, one connection): the same backend code, no file, its
RAM growing with the data, as the in-RAM baseline must show. (Not the ``memdb`` VFS: it
caps a database at 1 GiB, which the headline benchmark's 20,000 agents x 20 turns pass.)
"""

from __future__ import annotations

import functools
import importlib.util
import os
import time
from typing import Any

import apsw

from ...errors import DormantError, SchemaError, StoreError, StoreFull, StoreLocked, UsageError
from ..migrations import load_schema, migrate
from . import sql

#: The URL scheme of the in-memory database.
MEMORY_SCHEME = "memory://"


def translate(exc: BaseException) -> BaseException:
    """Turn an apsw error into the dormant error a caller should see."""
    if isinstance(exc, DormantError) or not isinstance(exc, apsw.Error):
        return exc
    if isinstance(exc, apsw.FullError):
        new: StoreError = StoreFull(f"the database or its disk is full: {exc}")
    elif isinstance(exc, apsw.BusyError | apsw.LockedError):
        new = StoreLocked(f"the database stayed locked past the busy timeout: {exc}")
    elif isinstance(exc, apsw.CorruptError | apsw.NotADBError):
        new = SchemaError(f"the database file is damaged ({exc}); run `dormant doctor`")
    else:
        new = StoreError(f"SQLite error: {exc}")
    new.__cause__ = exc
    return new


def path_from_url(url: str) -> str:
    """The file of a SQLite URL: ``sqlite:///rel.db`` is relative, ``sqlite:////abs.db`` absolute."""
    if not url.startswith("sqlite:///"):
        raise UsageError(f"not a SQLite URL: {url!r} (expected sqlite:///path/to/file.db)")
    path = url[len("sqlite:///") :]
    if not path or path.endswith("/"):
        raise UsageError(f"SQLite URL has no file path: {url!r}")
    return path


def memory_name() -> str:
    """A fresh private in-memory database (every ``:memory:`` connection is its own)."""
    return ":memory:"


def file_size(path: str | None) -> int:
    """Bytes of ``path`` (0 when there is no such file)."""
    if path is None:
        return 0
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def connect(
    name: str,
    *,
    memory: bool,
    page_size: int,
    cache_kib: int,
    synchronous: str,
    busy_timeout_ms: int,
    max_page_count: int | None,
) -> apsw.Connection:
    """A configured connection to the file (or ``:memory:``) ``name``."""
    try:
        flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
        conn = apsw.Connection(name, flags=flags)
        conn.setbusytimeout(busy_timeout_ms)
        # Query planner stability: without it, this SQLite (built with STAT4)
        # re-prepares a statement whenever a bound value compared with an indexed
        # column changes, i.e. on nearly every execution (measured 3-5x per query).
        conn.config(apsw.SQLITE_DBCONFIG_ENABLE_QPSG, 1)
        # only takes effect on a new file, and only before WAL mode is set
        conn.execute(sql.PRAGMA_PAGE_SIZE.format(int(page_size)))
        if not memory:
            _enable_wal(conn, busy_timeout_ms)
        # a fixed page cache per connection (SQLite's own heap, outside the view cache
        # budget). Set after the file is read: SQLite turns KiB into pages with the page
        # size it knows at the time, which before the first read is 4 KiB, not 16.
        conn.execute(sql.PRAGMA_CACHE_KIB.format(int(cache_kib)))
        conn.execute(sql.PRAGMA_SYNCHRONOUS.format(synchronous))
        conn.execute(sql.PRAGMA_FOREIGN_KEYS)
        if max_page_count is not None:
            conn.execute(sql.PRAGMA_MAX_PAGE_COUNT.format(int(max_page_count)))
        return conn
    except apsw.Error as exc:
        raise translate(exc) from exc


def load_vector_extension(conn: Any) -> bool:
    """Load sqlite-vec (memory's vector index) into ``conn``; False when it cannot be
    loaded (not installed, or extensions disabled): memory then recalls by text +
    structure and says so."""
    path = vector_extension_path()
    if path is None:
        return False
    try:
        conn.enable_load_extension(True)
        try:
            conn.load_extension(path)
        finally:
            conn.enable_load_extension(False)
        return True
    except (apsw.Error, AttributeError):
        return False


@functools.cache
def vector_extension_path() -> str | None:
    """Where the ``sqlite-vec`` package keeps its loadable extension (``vec0``, the suffix
    left to SQLite), found without importing the package: its ``__init__`` imports numpy
    when installed (~11 MB resident), which a store that never recalls must not pay."""
    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(next(iter(spec.submodule_search_locations)), "vec0")


def _enable_wal(conn: Any, busy_timeout_ms: int) -> None:
    """Put the file in WAL mode, waiting up to the busy timeout for other processes.

    Switching a new file to WAL takes a lock that SQLite's busy handler does not
    wait for: a second process opening the same new file at the same moment gets
    SQLITE_BUSY at once (two ``dormant run`` started together, say). Retry instead.
    """
    deadline = time.monotonic() + busy_timeout_ms / 1000
    while True:
        try:
            conn.execute(sql.PRAGMA_WAL)
            return
        except apsw.BusyError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


#: The snapshot and numbered migrations shipped in this package.
SCHEMA = load_schema(__package__ or "dormant.store.sqlite")


class _Migrator:
    """:class:`~dormant.store.migrations.MigrationDB` over a connection in a transaction."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def version(self) -> int | None:
        if not self.conn.execute(sql.HAS_VERSION_TABLE).fetchall():
            return None
        row = self.conn.execute(sql.GET_VERSION).fetchone()
        return int(row[0]) if row else 0

    async def execute(self, script: str) -> None:
        self.conn.execute(script)

    async def set_version(self, version: int, *, new: bool) -> None:
        self.conn.execute(sql.INSERT_VERSION if new else sql.SET_VERSION, (version,))


async def migrate_schema(conn: Any, where: str) -> None:
    """Create or migrate the schema in one ``BEGIN IMMEDIATE`` transaction."""
    try:
        conn.execute(sql.BEGIN_IMMEDIATE)
        try:
            await migrate(_Migrator(conn), SCHEMA, where=where)
            conn.execute(sql.COMMIT)
        except BaseException:
            conn.execute(sql.ROLLBACK)
            raise
    except apsw.Error as exc:
        raise translate(exc) from exc
