"""Which lease owners of a SQLite file are alive: one OS file lock per worker.

Every worker that claims from a SQLite file first takes an exclusive ``flock`` on a
lock file of its own, ``<db>.workers/<sha256 of its id>.lock`` (the id written in it),
and holds it as long as its store is open. The kernel drops that lock when the process
ends, however it ends (kill -9 included). So a lock another process can take proves
its worker dead: its leases can be released at once instead of waiting for them to
expire. A worker whose lock file is missing (an older version, a lock
directory that cannot be written) is never judged: its leases expire as before.

Local files only: ``flock`` is not shared across hosts (nor is a SQLite file).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
from collections.abc import Iterator

log = logging.getLogger("dormant.store")

#: lock files looked at per scan (a bounded directory listing)
MAX_SCAN = 1024


def lock_dir(db_path: str) -> str:
    """The directory of the worker lock files of the database ``db_path``."""
    return f"{os.path.abspath(db_path)}.workers"


def lock_name(worker: str) -> str:
    """The lock file name of ``worker`` (ids may hold any character: a hash)."""
    return hashlib.sha256(worker.encode()).hexdigest()[:32] + ".lock"


class WorkerLocks:
    """The locks this process holds for its workers, and the test of other workers'."""

    def __init__(self, db_path: str) -> None:
        self.dir = lock_dir(db_path)
        self._held: dict[str, int] = {}  # worker id -> fd of its locked file (few: one a runtime)

    def hold(self, worker: str) -> bool:
        """Take (once) the lock of ``worker``; False if it cannot be taken (another live
        process uses the same worker id, or the directory is not writable): this worker's
        leases then only expire."""
        if worker in self._held:
            return True
        if len(self._held) >= 64:
            return False
        try:
            os.makedirs(self.dir, exist_ok=True)
            fd = os.open(os.path.join(self.dir, lock_name(worker)), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            log.warning("worker_lock_unavailable", extra={"worker": worker, "error": str(exc)})
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.ftruncate(fd, 0)
            os.write(fd, worker.encode())
        except OSError as exc:
            os.close(fd)
            log.warning("worker_lock_taken", extra={"worker": worker, "error": str(exc)})
            return False
        self._held[worker] = fd
        return True

    @contextlib.contextmanager
    def dead(self) -> Iterator[list[str]]:
        """The ids of workers proven dead (their lock files taken here), held for the
        ``with`` block (release their leases in it); the files are removed after it."""
        taken: list[tuple[str, str, int]] = []
        try:
            for path in self._candidates():
                found = _take(path)
                if found is not None:
                    taken.append((path, *found))
            yield [worker for _, worker, _ in taken]
        except BaseException:
            for _, _, fd in taken:
                os.close(fd)
            raise
        for path, _, fd in taken:  # only once their leases are released
            with contextlib.suppress(OSError):
                os.unlink(path)
            os.close(fd)

    def _candidates(self) -> list[str]:
        mine = {lock_name(w) for w in self._held}
        paths: list[str] = []
        try:
            with os.scandir(self.dir) as entries:
                for entry in entries:
                    if entry.name.endswith(".lock") and entry.name not in mine:
                        paths.append(entry.path)
                        if len(paths) >= MAX_SCAN:
                            break
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("worker_locks_unreadable", extra={"error": str(exc)})
        return paths

    def close(self) -> None:
        """Drop the locks held (the workers end) and remove their files."""
        for worker, fd in self._held.items():
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.dir, lock_name(worker)))
            os.close(fd)
        self._held.clear()


def _take(path: str) -> tuple[str, int] | None:
    """(worker id, fd) if the lock of ``path`` could be taken (its worker is dead)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None  # removed meanwhile: its worker closed, or another process judged it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_nlink == 0:  # removed after we opened it
            raise OSError("gone")
        worker = os.read(fd, 4096).decode(errors="replace")
    except OSError:
        os.close(fd)
        return None
    if not worker:  # a worker between creating and writing its file: not judged
        os.close(fd)
        return None
    return worker, fd
