"""What ``dormant doctor`` reads from a SQLite store: facts, no judgement.

:func:`inspect_sqlite` opens the file read-only, without the store (which would
migrate it and refuse a damaged file), and answers a :class:`SQLiteFacts`:
integrity, schema version, sizes, leases that expired, outbox entries that
are overdue or whose result never reached their thread, threads that wait for
a result that cannot come, failed threads. :mod:`dormant.doctor` decides what
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

from .connect import SCHEMA, path_from_url

T = TypeVar("T")


class SQLiteFacts(msgspec.Struct, kw_only=True):
    """What :func:`inspect_sqlite` found. Samples hold at most ``sample`` items."""

    path: str
    exists: bool = True
    open_error: str | None = None
    integrity_mode: str = "full"
    integrity: list[str] = msgspec.field(default_factory=list)
    foreign_key_errors: int = 0
    schema_version: int | None = None
    expected_version: int = SCHEMA.version
    db_bytes: int = 0
    wal_bytes: int = 0
    page_size: int = 0
    page_count: int = 0
    freelist_pages: int = 0
    threads: int = 0
    failed_threads: int = 0
    failed_sample: list[tuple[str, int, str]] = msgspec.field(default_factory=list)
    expired_leases: int = 0
    expired_sample: list[tuple[str, str]] = msgspec.field(default_factory=list)
    overdue_threads: int = 0
    outbox_by_status: dict[str, int] = msgspec.field(default_factory=dict)
    expired_calls: int = 0
    overdue_calls: int = 0
    undelivered: int = 0
    undelivered_sample: list[tuple[str, str, str]] = msgspec.field(default_factory=list)
    stalled_threads: int = 0
    stalled_sample: list[tuple[str, int, int]] = msgspec.field(default_factory=list)
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
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
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
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except apsw.Error as exc:
        facts.open_error = f"{type(exc).__name__}: {exc}"
        return
    check = "quick_check" if quick else "integrity_check"
    try:
        lines = [str(r[0]) for r in conn.execute(f"PRAGMA {check}(20)")]
    except apsw.Error as exc:  # so damaged that the check itself gives up
        lines = [f"{check} stopped: {type(exc).__name__}: {exc}"]
    if lines != ["ok"]:
        facts.integrity = [part for line in lines for part in line.split("\n")][:20]
    facts.foreign_key_errors = guard(
        "foreign keys", lambda: len(conn.execute("PRAGMA foreign_key_check").fetchall()), 0
    )
    facts.page_size = guard("page size", lambda: int(one("PRAGMA page_size")), 0)
    facts.page_count = guard("page count", lambda: int(one("PRAGMA page_count")), 0)
    facts.freelist_pages = guard("freelist", lambda: int(one("PRAGMA freelist_count")), 0)
    if "schema_version" not in tables:
        facts.read_errors.append("no schema_version table: not a dormant database (or an unfinished one)")
        return
    facts.schema_version = guard(
        "schema version", lambda: one("SELECT max(version) FROM schema_version"), None
    )
    if not {"threads", "inputs", "input_keys", "outbox"} <= tables:
        facts.read_errors.append(f"tables missing: found only {sorted(tables)}")
        return

    facts.threads = guard("threads", lambda: int(one("SELECT COUNT(*) FROM threads")), 0)
    facts.failed_threads = guard(
        "failed threads", lambda: int(one("SELECT COUNT(*) FROM threads WHERE status = 'failed'")), 0
    )
    facts.failed_sample = guard(
        "failed threads",
        lambda: [
            (str(r[0]), int(r[1]), str(r[2] or "no reason recorded"))
            for r in conn.execute(
                "SELECT id, failures, error FROM threads WHERE status = 'failed' "
                "ORDER BY updated_at DESC LIMIT ?",
                (sample,),
            )
        ],
        [],
    )
    expired = "lease_token IS NOT NULL AND lease_expires <= ?"
    facts.expired_leases = guard(
        "leases", lambda: int(one(f"SELECT COUNT(*) FROM threads WHERE {expired}", (now,))), 0
    )
    facts.expired_sample = guard(
        "leases",
        lambda: [
            (str(r[0]), str(r[1] or "?"))
            for r in conn.execute(
                f"SELECT id, lease_owner FROM threads WHERE {expired} ORDER BY lease_expires LIMIT ?",
                (now, sample),
            )
        ],
        [],
    )
    # ready_key is when the oldest ready input became claimable (plus at most a minute of
    # priority aging): older than `overdue` and not leased means no worker took it
    facts.overdue_threads = guard(
        "ready threads",
        lambda: int(
            one(
                "SELECT COUNT(*) FROM threads WHERE ready_key IS NOT NULL AND ready_key <= ? "
                "AND lease_expires <= ?",
                (overdue, now),
            )
        ),
        0,
    )
    facts.outbox_by_status = guard(
        "outbox",
        lambda: {
            str(s): int(n) for s, n in conn.execute("SELECT status, COUNT(*) FROM outbox GROUP BY status")
        },
        {},
    )
    facts.expired_calls = guard(
        "outbox leases",
        lambda: int(
            one("SELECT COUNT(*) FROM outbox WHERE status = 'running' AND lease_expires <= ?", (now,))
        ),
        0,
    )
    facts.overdue_calls = guard(
        "overdue calls",
        lambda: int(
            one("SELECT COUNT(*) FROM outbox WHERE status = 'pending' AND available_at <= ?", (overdue,))
        ),
        0,
    )
    # a dead-lettered or unknown call must have had its (error) result admitted to its
    # thread in the same transaction: its dedup key (the call id) is then known
    undelivered = (
        "FROM outbox o WHERE o.status IN ('dead', 'unknown') AND NOT EXISTS "
        "(SELECT 1 FROM input_keys k WHERE k.thread_id = o.thread_id AND k.dedup_key = o.call_id)"
    )
    facts.undelivered = guard("undelivered", lambda: int(one(f"SELECT COUNT(*) {undelivered}")), 0)
    facts.undelivered_sample = guard(
        "undelivered",
        lambda: [
            (str(r[0]), str(r[1]), str(r[2]))
            for r in conn.execute(
                f"SELECT o.thread_id, o.call_id, o.status {undelivered} ORDER BY o.id LIMIT ?", (sample,)
            )
        ],
        [],
    )
    # a thread waits for `awaiting` results: each is an open call or an admitted result
    stalled = """
        FROM (
            SELECT t.id, t.awaiting,
                (SELECT COUNT(*) FROM outbox o
                 WHERE o.thread_id = t.id AND o.status IN ('pending', 'running'))
              + (SELECT COUNT(*) FROM inputs i
                 WHERE i.thread_id = t.id AND i.kind = 'tool_result') AS n
            FROM threads t WHERE t.awaiting > 0)
        WHERE awaiting > n
    """
    facts.stalled_threads = guard("waiting threads", lambda: int(one(f"SELECT COUNT(*) {stalled}")), 0)
    facts.stalled_sample = guard(
        "waiting threads",
        lambda: [
            (str(r[0]), int(r[1]), int(r[2]))
            for r in conn.execute(f"SELECT id, awaiting, n {stalled} ORDER BY id LIMIT ?", (sample,))
        ],
        [],
    )
