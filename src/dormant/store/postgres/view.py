"""The view loader of the PostgreSQL backend: :func:`~dormant.context.build_view` over
rows fetched on demand."""

from __future__ import annotations

from ...context import build_view
from ...records import Message, Summary, Thread, ViewLimits
from ..rows import row_message, row_summary
from . import sql
from .driver import Conn


class _Missing(Exception):
    """build_view asked for data not fetched yet: (thread, max_seq, min_seq, limit) or (thread,)."""


async def load_view(
    conn: Conn, thread: Thread, limits: ViewLimits
) -> tuple[tuple[Message, ...], Summary | None, int]:
    """The view, its summary and how many of its messages are inherited.

    build_view is pure and its callbacks are synchronous, so it runs against what has
    been fetched so far; when it asks for more (older messages, a parent link) the
    answer is fetched and it runs again: one round trip per chunk or level of lineage.
    """
    messages: dict[tuple[str, int, int], tuple[int, list[Message]]] = {}
    parents: dict[str, tuple[str, int] | None] = {}

    async def parent(thread_id: str) -> tuple[str, int] | None:
        if thread_id not in parents:
            row = await (await conn.execute(sql.PARENT_OF, (thread_id,))).fetchone()
            parents[thread_id] = (row[0], row[1]) if row and row[0] else None
        return parents[thread_id]

    summary: Summary | None = None
    if thread.summary_seq:
        row = await (await conn.execute(sql.SUMMARY_AT, (thread.id, thread.summary_seq))).fetchone()
        summary = row_summary(row) if row else None
    else:
        link = (thread.parent_id, thread.parent_seq) if thread.parent_id else None
        while link is not None:
            row = await (await conn.execute(sql.SUMMARY_INHERITED, link)).fetchone()
            if row is not None:
                summary = row_summary(row)
                break
            link = await parent(link[0])

    def fetch(thread_id: str, max_seq: int, min_seq: int, limit: int) -> list[Message]:
        got = messages.get((thread_id, max_seq, min_seq))
        # a shorter answer than asked for means the history ended there
        if got is None or (got[0] < limit and len(got[1]) >= got[0]):
            raise _Missing(thread_id, max_seq, min_seq, limit)
        return got[1][:limit]

    def parent_of(thread_id: str) -> tuple[str, int] | None:
        if thread_id not in parents:
            raise _Missing(thread_id)
        return parents[thread_id]

    while True:
        try:
            view, inherited = build_view(thread, limits, fetch, parent_of, summary)
            return view, summary, inherited
        except _Missing as missing:
            if len(missing.args) == 4:
                thread_id, max_seq, min_seq, limit = missing.args
                cursor = await conn.execute(sql.NEWEST_MESSAGES, (thread_id, max_seq, min_seq, limit))
                rows = [row_message(r) for r in await cursor.fetchall()]
                messages[(thread_id, max_seq, min_seq)] = (limit, rows)
            else:
                await parent(missing.args[0])
