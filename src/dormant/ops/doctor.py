"""``dormant doctor``: is this store healthy, and if not, what should the operator do?

:func:`diagnose` reads a store's facts (for SQLite, :mod:`dormant.store.sqlite.doctor`,
which opens the file read-only and never through the store, so a damaged file can
still be examined; for PostgreSQL, :mod:`dormant.store.postgres.doctor`, a plain
read-only connection) and judges them into :class:`Finding` rows, each with a level:

* ``ok`` / ``info`` — nothing to do;
* ``warn`` — needs attention but breaks no rule: leases of a dead worker not yet
  taken over, work nobody ran for a while (no worker running?), failed threads
  waiting for ``dormant retry``, a WAL that keeps growing, a standby far behind;
* ``fail`` — the store is damaged or a correctness rule is broken: integrity
  errors (``amcheck`` on PostgreSQL), an unknown schema version, a dead-lettered or
  unknown call whose result never reached its thread, a thread waiting for a result
  that cannot come, a server that cannot be reached, synchronous replication with no
  standby streaming.

:attr:`Report.exit_code` is 0 when healthy, 3 with warnings only, 1 with any failure.
:func:`failed_threads` pages through failed threads on any backend (``dormant threads
--failed``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from rich.text import Text

from ..records import Thread
from ..store.base import MAX_PAGE, Store
from ..store.health import Report

#: Pages of threads ``threads --failed`` examines per invocation (it prints where to go on).
FAILED_SCAN_PAGES = 20


async def failed_threads(
    st: Store,
    cursor: str | None,
    limit: int,
) -> tuple[list[Thread], str | None, int]:
    """Up to ``limit`` failed threads after ``cursor``, scanning at most FAILED_SCAN_PAGES pages.

    Returns the threads, the cursor to continue from (None when every thread was
    examined) and how many threads were examined.
    """
    found: list[Thread] = []
    examined = 0
    for _ in range(FAILED_SCAN_PAGES):
        page = await st.list_threads(cursor=cursor, limit=MAX_PAGE)
        for row in page.items:
            examined += 1
            cursor = row.id
            if row.status == "failed":
                found.append(row)
                if len(found) == limit:
                    return found, cursor, examined
        if page.next_cursor is None:
            return found, None, examined
    return found, cursor, examined


def diagnose(
    url: str, *, quick: bool = False, stuck_after_s: float = 300.0, now: float | None = None
) -> Report:
    """Examine the store at ``url`` without changing it (nor opening it: a damaged
    database can still be examined); its backend decides what to read and judge
    (SQLite: the file, read-only; PostgreSQL: a plain read-only connection, the
    server's clock; an unreachable server is a ``connect`` failure in the report).

    Raises :class:`UsageError` for a store doctor cannot examine (``memory://`` keeps
    nothing to examine) or a SQLite file that does not exist.
    """
    from ..store import open_store

    when = time.time() if now is None else now
    return open_store(url).diagnose(quick=quick, now=when, stuck_after_s=stuck_after_s)


_STYLES = {"ok": "green", "info": "cyan", "warn": "yellow", "fail": "bold red"}
_VERDICT = {"ok": "healthy", "info": "healthy", "warn": "needs attention", "fail": "DAMAGED or broken"}


def render(report: Report) -> Iterator[Text]:
    """The report as lines for a terminal: a line per finding, its details and hint, a verdict."""
    yield Text(f"dormant doctor — {report.store}", style="bold")
    for finding in report.findings:
        yield Text.assemble(
            (f"{finding.level:>4} ", _STYLES[finding.level]), (f"{finding.check}: ", "bold"), finding.summary
        )
        for detail in finding.details:
            yield Text(f"       {detail}", style="dim")
        if finding.hint and finding.level in ("warn", "fail"):
            yield Text(f"       → {finding.hint}")
    yield Text(f"verdict: {_VERDICT[report.level]} (exit {report.exit_code})", style=_STYLES[report.level])
