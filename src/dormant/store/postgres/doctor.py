"""What ``dormant doctor`` reads from a PostgreSQL store: facts, no judgement.

:func:`inspect_postgres` connects with a plain connection (no pool, no store, no
migration: a store the runtime refuses to open can still be examined), read-only
(``default_transaction_read_only``), with a statement timeout, and answers a
:class:`PgFacts`: the server and the schema version, ``amcheck`` on the store's B-tree
indexes where the extension is installed (doctor never installs it), leases that lapsed
(expired, or held by a worker that stopped heartbeating), the workers and their
heartbeats, work nobody took, dead-lettered or unknown calls whose result never reached
their thread, threads waiting for results that cannot come, failed threads, and
replication (standbys and their lag, seen from the primary; the replay age on a
standby). :mod:`.judge` decides what is wrong. Every read is guarded: what could not be
read is reported as such (without the URL's password) and the rest is still read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
import psycopg
from psycopg import sql as pgsql

from ...urls import scrub
from ..health import WorkFacts
from . import doctor_sql as q
from .schema import SCHEMA_VERSION

T = TypeVar("T")

#: Rows of workers and standbys read at most.
MAX_ROWS = 50


class PgFacts(WorkFacts, kw_only=True):
    """What :func:`inspect_postgres` found. Samples hold at most ``sample`` items."""

    connect_error: str | None = None
    server_version: str = ""
    host: str = ""
    schema: str = ""
    in_recovery: bool = False
    now: float = 0.0
    expected_version: int = SCHEMA_VERSION
    amcheck: str = "skipped"  # skipped (quick) | missing | available | checked
    amcheck_indexes: int = 0
    amcheck_failed: int = 0
    amcheck_errors: list[str] = msgspec.field(default_factory=list)
    dead_after_s: float = 4.0
    workers: int = 0
    #: (id, host, pid, seconds since its heartbeat, thread leases, call leases), oldest beat first
    worker_rows: list[tuple[str, str, int, float, int, int]] = msgspec.field(default_factory=list)
    sync_standby_names: str = ""
    #: (application name, address, state, sync state, replay lag s, bytes behind)
    standbys: list[tuple[str, str, str, str, float, float]] = msgspec.field(default_factory=list)
    replay_age_s: float | None = None
    read_errors: list[str] = msgspec.field(default_factory=list)


def _error(exc: BaseException) -> str:
    return scrub(f"{type(exc).__name__}: {str(exc).strip()}")


def inspect_postgres(
    url: str,
    *,
    quick: bool = False,
    stuck_after_s: float = 300.0,
    dead_after_s: float = 4.0,
    sample: int = 5,
    timeout_s: float = 30.0,
) -> PgFacts:
    """Read the health facts of the store at ``url`` (never writes to it).

    ``quick`` skips ``amcheck``. Work ready or due for more than ``stuck_after_s``
    seconds (by the server's clock, as the leases) counts as overdue; a worker silent
    for ``dead_after_s`` seconds is dead (its leases are free to the others).
    """
    facts = PgFacts(dead_after_s=dead_after_s)
    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
        conn.execute(q.SESSION, (str(int(timeout_s * 1000)),))
    except psycopg.Error as exc:
        facts.connect_error = _error(exc)
        return facts
    try:
        with conn:
            _read(conn, facts, quick=quick, stuck_after_s=stuck_after_s, sample=sample)
    except psycopg.Error as exc:  # the connection itself broke
        facts.read_errors.append(f"connection lost: {_error(exc)}")
    return facts


def _read(
    conn: psycopg.Connection[Any], facts: PgFacts, *, quick: bool, stuck_after_s: float, sample: int
) -> None:
    def guard(what: str, read: Callable[[], T], default: T) -> T:
        try:
            return read()
        except psycopg.Error as exc:
            facts.read_errors.append(f"{what}: {_error(exc)}")
            return default

    def rows(statement: str, **params: Any) -> list[tuple[Any, ...]]:
        return conn.execute(statement, params or None).fetchall()

    def one(statement: str, **params: Any) -> Any:
        found = rows(statement, **params)
        return found[0][0] if found else None

    facts.host = conn.info.host
    now, facts.server_version, facts.in_recovery, schema = rows(q.SERVER)[0]
    facts.now, facts.schema = float(now), str(schema or "")
    _replication(conn, facts, guard, rows, one)
    if not one(q.SCHEMA_EXISTS):
        facts.read_errors.append(
            f"no schema_version table in schema {facts.schema!r}: not a dormant database "
            "(or not yet initialised, or the wrong search_path)"
        )
        return
    facts.schema_version = guard("schema version", lambda: one(q.VERSION), None)
    listed: list[tuple[Any, ...]] = guard("tables", lambda: rows(q.TABLES), [])
    tables = {str(r[0]) for r in listed}
    if not {"threads", "inputs", "input_keys", "outbox", "workers", "approvals"} <= tables:
        facts.read_errors.append(f"tables missing: found only {sorted(tables)}")
        return
    if not quick:
        _amcheck(conn, facts, guard, rows, one)
    p: dict[str, Any] = {
        "now": facts.now,
        "overdue": facts.now - stuck_after_s,
        "dead": facts.dead_after_s,
        "sample": sample,
        "limit": MAX_ROWS,
    }
    facts.threads = guard("threads", lambda: int(one(q.THREADS)), 0)
    facts.failed_threads = guard("failed threads", lambda: int(one(q.FAILED)), 0)
    facts.failed_sample = guard(
        "failed threads",
        lambda: [
            (str(r[0]), int(r[1]), str(r[2] or "no reason recorded")) for r in rows(q.FAILED_SAMPLE, **p)
        ],
        [],
    )
    facts.expired_leases = guard("leases", lambda: int(one(q.EXPIRED, **p)), 0)
    facts.expired_sample = guard(
        "leases", lambda: [(str(r[0]), str(r[1])) for r in rows(q.EXPIRED_SAMPLE, **p)], []
    )
    facts.overdue_threads = guard("ready threads", lambda: int(one(q.OVERDUE_THREADS, **p)), 0)
    facts.outbox_by_status = guard(
        "outbox", lambda: {str(s): int(n) for s, n in rows(q.OUTBOX_BY_STATUS)}, {}
    )
    facts.expired_calls = guard("outbox leases", lambda: int(one(q.EXPIRED_CALLS, **p)), 0)
    facts.overdue_calls = guard("overdue calls", lambda: int(one(q.OVERDUE_CALLS, **p)), 0)
    facts.undelivered = guard("undelivered", lambda: int(one(q.UNDELIVERED)), 0)
    facts.undelivered_sample = guard(
        "undelivered",
        lambda: [(str(r[0]), str(r[1]), str(r[2])) for r in rows(q.UNDELIVERED_SAMPLE, **p)],
        [],
    )
    facts.stalled_threads = guard("waiting threads", lambda: int(one(q.STALLED)), 0)
    facts.stalled_sample = guard(
        "waiting threads",
        lambda: [(str(r[0]), int(r[1]), int(r[2])) for r in rows(q.STALLED_SAMPLE, **p)],
        [],
    )
    facts.workers = guard("workers", lambda: int(one(q.WORKER_COUNT)), 0)
    facts.worker_rows = guard(
        "workers",
        lambda: [
            (str(r[0]), str(r[1]), int(r[2]), float(r[3]), int(r[4]), int(r[5])) for r in rows(q.WORKERS, **p)
        ],
        [],
    )


Guard = Callable[[str, Callable[[], Any], Any], Any]


def _replication(conn: Any, facts: PgFacts, guard: Guard, rows: Any, one: Any) -> None:
    if facts.in_recovery:
        facts.replay_age_s = guard("replay", lambda: one(q.REPLAY_AGE), None)
        return
    facts.sync_standby_names = guard("replication", lambda: str(one(q.SYNC_NAMES) or ""), "")
    facts.standbys = guard(
        "replication",
        lambda: [
            (str(r[0]), str(r[1]), str(r[2]), str(r[3]), float(r[4]), float(r[5]))
            for r in rows(q.STANDBYS, limit=MAX_ROWS)
        ],
        [],
    )


def _amcheck(conn: Any, facts: PgFacts, guard: Guard, rows: Any, one: Any) -> None:
    schema = guard("amcheck", lambda: one(q.AMCHECK), None)
    if schema is None:
        available = guard("amcheck", lambda: int(one(q.AMCHECK_AVAILABLE)), 0)
        facts.amcheck = "available" if available else "missing"
        return
    facts.amcheck = "checked"
    check = pgsql.SQL(q.BT_CHECK).format(schema=pgsql.Identifier(str(schema)))
    indexes: list[tuple[Any, ...]] = guard("amcheck", lambda: rows(q.STORE_INDEXES), [])
    for name, oid in indexes:
        facts.amcheck_indexes += 1
        try:
            conn.execute(check, (oid, False))
        except psycopg.Error as exc:
            facts.amcheck_failed += 1
            if len(facts.amcheck_errors) < 20:
                facts.amcheck_errors.append(f"{name}: {_error(exc)}")
