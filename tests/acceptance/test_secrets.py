"""The store password never shows: not in worker argv (``ps``), not in what
``dormant`` prints or logs, not in error text."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from dormant.store.postgres.embedded import with_schema

from .runner import Cli, clean_env

SECRET = "Xyzzy-S3cret-9f2"


@pytest.fixture
def secret_url(pg_url: str) -> str:
    """``pg_url`` with a password (the test server trusts local connections: it is ignored)."""
    parts = urlsplit(pg_url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{parts.username or 'postgres'}:{SECRET}@{host}"))


def wait_for(path: Path, text: str, count: int = 1, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = path.read_text() if path.exists() else ""
        if seen.count(text) >= count:
            return seen
        time.sleep(0.05)
    raise AssertionError(f"{text!r} x{count} never appeared in:\n{path.read_text()}")


def test_workers_get_the_store_url_by_environment_and_nothing_prints_its_password(
    secret_url: str, tmp_path: Path
) -> None:
    cli = Cli(cwd=tmp_path, store=secret_url)
    init = cli("--log-level", "debug", "init")
    assert init.returncode == 0, init.stderr
    assert SECRET not in init.stdout + init.stderr and ":***@" in init.stdout
    log = tmp_path / "supervisor.log"
    with open(log, "w") as stderr:
        proc = subprocess.Popen(
            cli.argv("--log-level", "debug", "run", "--workers", "2", store=False),
            cwd=tmp_path,
            env=clean_env({"DORMANT_STORE": secret_url}),
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        try:
            text = wait_for(log, "dormant running on", count=2)
            pids = [int(line.split("(pid ")[1].rstrip(")")) for line in text.splitlines() if "(pid " in line]
            assert len(pids) == 2
            for pid in pids:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                assert b"run" in argv, argv  # it is the worker, still running
                assert SECRET.encode() not in b" ".join(argv), "the password is in a worker's argv"
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, log.read_text()
    printed = out + log.read_text()
    assert SECRET not in printed, "the password was printed or logged"
    assert "dormant running on postgresql://postgres:***@" in printed


def test_store_errors_never_show_the_password(secret_url: str, tmp_path: Path) -> None:
    missing_schema = with_schema(secret_url, "no_such_schema_here")
    result = Cli(cwd=tmp_path, store=missing_schema)("--log-level", "debug", "status")
    assert result.returncode != 0 and result.stderr.startswith("error: "), result.stderr
    assert "no schema" in result.stderr
    assert SECRET not in result.stdout + result.stderr


async def test_the_store_itself_never_puts_the_password_in_its_errors(secret_url: str) -> None:
    """Not only what the CLI prints (it scrubs): the store's own error text (a library
    caller logs it as it is)."""
    from dormant.errors import DormantError
    from dormant.store.postgres import PostgresStore

    store = PostgresStore(with_schema(secret_url, "no_such_schema_here"), pool_size=1)
    with pytest.raises(DormantError) as caught:
        await store.open()
    assert "no schema" in str(caught.value)
    assert SECRET not in str(caught.value)
