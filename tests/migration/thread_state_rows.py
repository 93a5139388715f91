"""One pre-migration journal for both dialects' "thread state on the row" migrations
(sqlite 9, postgres 11): the rows to insert and what the migrated store must say."""

from __future__ import annotations

from dormant.store.core import StoreCore

THREADS = ("journaled", "plain", "also")
#: (thread_id, seq, kind, key, value) of state_journal rows
CHANGES = (
    ("journaled", 1, "add", "_subject", '"b1_old"'),
    ("journaled", 2, "update", "_subject", '"b1_new"'),
    ("journaled", 3, "add", "tsr:order_id", '{"v": "ORD-1", "turn": 1}'),
    ("also", 1, "add", "_subject", '"b1_new"'),
)
#: the state column after the migration: NULL (replayed) where a journal exists, else empty
STATE_AFTER = {"journaled": None, "plain": "{}", "also": None}


async def check_subjects(store: StoreCore) -> None:
    """The subject of each journaled thread is its newest ``_subject`` change."""
    try:
        assert await store.subject_threads("also", "b1_new") == ["journaled"]
        assert await store.subject_threads("journaled", "b1_old") == []
    finally:
        await store.close()
