"""What ``dormant doctor`` reads from a SQLite store: facts, no judgement.

:func:`inspect_sqlite` opens the file read-only, without the store (which would
migrate it and refuse a damaged file), and answers a :class:`SQLiteFacts`:
integrity, schema version, sizes, leases that expired, outbox entries that
are overdue or whose result never reached their thread, threads that wait for
a result that cannot come, failed threads. :mod:`dormant.ops.doctor` decides what
is wrong. Every query is guarded: on a damaged file, what could not be read is
reported as such and the rest is still read.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

import apsw
import msgspec

from ..health import WorkFacts
from . import sql
from .connect import SCHEMA, path_from_url

T = TypeVar("T")


class SQLiteFacts(WorkFacts, kw_only=True):
    """What :func:`inspect_sqlite` found. Samples hold at most ``sample`` items."""

    path: str
    exists: bool = True
    open_error: str | None = None
    integrity_mode: str = "full"
    integrity: list[str] = msgspec.field(default_factory=list)
    foreign_key_errors: int = 0
    expected_version: int = SCHEMA.version
    db_bytes: int = 0
    wal_bytes: int = 0
    page_size: int = 0
    page_count: int = 0
    freelist_pages: int = 0
    read_errors: list[str] = msgspec.field(default_factory=list)


def sqlite_path(url: str) -> str:
    """The file of a ``sqlite:///`` URL; UsageError for anything else."""
    return path_from_url(url)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _connect(path: str) -> apsw.Connection:
    """A read-only connection; read-write (never written) if WAL needs its -shm file created."""
    try:
        conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
        conn.execute(sql.DOCTOR_PROBE).fetchall()
    except apsw.CantOpenError:
        conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READWRITE)
    conn.setbusytimeout(2000)
    return conn


def inspect_sqlite(
    path: str,
    *,
    quick: bool = False,
    now: float | None = None,
    stuck_after_s: float = 300.0,
    sample: int = 5,
) -> SQLiteFacts:
    """Read the health facts of the SQLite database at ``path`` (never writes to it).

    ``quick`` runs ``PRAGMA quick_check`` instead of the full ``integrity_check``
    (no index cross-check; much faster on a large file). Work ready or due for more
    than ``stuck_after_s`` seconds counts as overdue.
    """
    facts = SQLiteFacts(path=path, integrity_mode="quick" if quick else "full")
    if not os.path.exists(path):
        facts.exists = False
        return facts
    facts.db_bytes = _size(path)
    facts.wal_bytes = _size(path + "-wal")
    now = time.time() if now is None else now
    try:
        conn = _connect(path)
    except apsw.Error as exc:
        facts.open_error = f"{type(exc).__name__}: {exc}"
        return facts
    try:
        _read(conn, facts, quick=quick, now=now, overdue=now - stuck_after_s, sample=sample)
    finally:
        conn.close()
    return facts


def _read(conn: Any, facts: SQLiteFacts, *, quick: bool, now: float, overdue: float, sample: int) -> None:
    def guard(what: str, read: Callable[[], T], default: T) -> T:
        try:
            return read()
        except apsw.Error as exc:
            facts.read_errors.append(f"{what}: {type(exc).__name__}: {exc}")
            return default

    def one(sql: str, params: tuple[Any, ...] = ()) -> Any:
        row = conn.execute(sql, params).fetchone()
        return row[0] if row else None

    try:
        tables = {r[0] for r in conn.execute(sql.DOCTOR_TABLES)}
    except apsw.Error as exc:
        facts.open_error = f"{type(exc).__name__}: {exc}"
        return
    check = "quick_check" if quick else "integrity_check"
    try:
        lines = [str(r[0]) for r in conn.execute(sql.DOCTOR_CHECK.format(check))]
    except apsw.Error as exc:  # so damaged that the check itself gives up
        lines = [f"{check} stopped: {type(exc).__name__}: {exc}"]
    if lines != ["ok"]:
        facts.integrity = [part for line in lines for part in line.split("\n")][:20]
    facts.foreign_key_errors = guard(
        "foreign keys", lambda: len(conn.execute(sql.DOCTOR_FOREIGN_KEYS).fetchall()), 0
    )
    facts.page_size = guard("page size", lambda: int(one(sql.DOCTOR_PAGE_SIZE)), 0)
    facts.page_count = guard("page count", lambda: int(one(sql.DOCTOR_PAGE_COUNT)), 0)
    facts.freelist_pages = guard("freelist", lambda: int(one(sql.DOCTOR_FREELIST)), 0)
    if "schema_version" not in tables:
        facts.read_errors.append("no schema_version table: not a dormant database (or an unfinished one)")
        return
    facts.schema_version = guard("schema version", lambda: one(sql.DOCTOR_VERSION), None)
    if not {"threads", "inputs", "input_keys", "outbox"} <= tables:
        facts.read_errors.append(f"tables missing: found only {sorted(tables)}")
        return

    facts.threads = guard("threads", lambda: int(one(sql.DOCTOR_THREADS)), 0)
    facts.failed_threads = guard("failed threads", lambda: int(one(sql.DOCTOR_FAILED)), 0)
    facts.failed_sample = guard(
        "failed threads",
        lambda: [
            (str(r[0]), int(r[1]), str(r[2] or "no reason recorded"))
            for r in conn.execute(sql.DOCTOR_FAILED_SAMPLE, (sample,))
        ],
        [],
    )
    facts.expired_leases = guard("leases", lambda: int(one(sql.DOCTOR_EXPIRED, (now,))), 0)
    facts.expired_sample = guard(
        "leases",
        lambda: [
            (str(r[0]), str(r[1] or "?")) for r in conn.execute(sql.DOCTOR_EXPIRED_SAMPLE, (now, sample))
        ],
        [],
    )
    # ready_key is when the oldest ready input became claimable (plus at most a minute of
    # priority aging): older than `overdue` and not leased means no worker took it
    facts.overdue_threads = guard(
        "ready threads",
        lambda: int(one(sql.DOCTOR_OVERDUE_THREADS, (overdue, now))),
        0,
    )
    facts.outbox_by_status = guard(
        "outbox",
        lambda: {str(s): int(n) for s, n in conn.execute(sql.OUTBOX_BY_STATUS)},
        {},
    )
    facts.expired_calls = guard(
        "outbox leases",
        lambda: int(one(sql.DOCTOR_EXPIRED_CALLS, (now,))),
        0,
    )
    facts.overdue_calls = guard(
        "overdue calls",
        lambda: int(one(sql.DOCTOR_OVERDUE_CALLS, (overdue,))),
        0,
    )
    # a dead-lettered or unknown call must have had its (error) result admitted to its
    # thread in the same transaction: its dedup key (the call id) is then known
    facts.undelivered = guard("undelivered", lambda: int(one(sql.DOCTOR_UNDELIVERED)), 0)
    facts.undelivered_sample = guard(
        "undelivered",
        lambda: [
            (str(r[0]), str(r[1]), str(r[2])) for r in conn.execute(sql.DOCTOR_UNDELIVERED_SAMPLE, (sample,))
        ],
        [],
    )
    # a thread waits for `awaiting` results: each is an open call or an admitted result
    facts.stalled_threads = guard("waiting threads", lambda: int(one(sql.DOCTOR_STALLED)), 0)
    facts.stalled_sample = guard(
        "waiting threads",
        lambda: [
            (str(r[0]), int(r[1]), int(r[2])) for r in conn.execute(sql.DOCTOR_STALLED_SAMPLE, (sample,))
        ],
        [],
    )
