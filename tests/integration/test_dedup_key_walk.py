"""SQLite forgets dedup keys by walking their primary key a window at a time (there is
no index on their age): every old consumed key goes within a bounded number of calls,
each call visits a bounded window, and no key inside the horizon or still needed goes."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dormant.store.sqlite import SQLiteStore
from dormant.store.sqlite import retention as sqlite_retention
from tests.contract.support import plan, take, user
from tests.helpers import FakeClock

DAY = 86_400.0


async def consumed(store: SQLiteStore, thread: str, keys: list[str]) -> None:
    """Admit one input per key on ``thread`` and commit a slice consuming them all."""
    await store.admit([user(thread, k) for k in keys])
    c, load = await take(store, thread)
    await store.commit_slice(plan(c, load))


def key_count(path: Path) -> int:
    """Dedup keys in the file (read beside the store: WAL readers do not block)."""
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM input_keys").fetchone()[0])


@pytest.fixture
async def store(tmp_path: Path, clock: FakeClock) -> AsyncIterator[SQLiteStore]:
    opened = SQLiteStore(f"sqlite:///{tmp_path}/x.db", clock=clock)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


async def test_the_walk_forgets_every_old_key_window_by_window(
    store: SQLiteStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(sqlite_retention, "KEYS_WINDOW_MIN", 6)
    monkeypatch.setattr(sqlite_retention, "KEYS_WALKED", 0)  # windows of 6 keys, whatever the limit
    for t in range(5):
        await consumed(store, f"t{t}", [f"old{i}" for i in range(4)])  # 20 old keys
    clock.advance(8 * DAY)
    for t in range(5):
        await consumed(store, f"t{t}", [f"new{i}" for i in range(2)])  # 10 recent ones
    await store.admit([user("t2", "pending")])
    before = clock.now - 7 * DAY
    counts = [await store.prune_dedup_keys(before=before, limit=100) for _ in range(3)]
    assert counts == [4, 4, 4], "a call visits its window only; the next goes on after it"
    monkeypatch.setattr(sqlite_retention, "KEYS_WALKED", 2)  # limit 3: windows of 6 still
    for _ in range(20):
        gone = await store.prune_dedup_keys(before=before, limit=3)
        assert gone <= 3
        counts.append(gone)
        if key_count(tmp_path / "x.db") == 11:
            break
    assert sum(counts) == 20, f"every old consumed key goes, a window at a time: {counts}"
    assert await store.prune_dedup_keys(before=before, limit=3) == 0
    dups = await store.admit([user(f"t{t}", f"new{i}") for t in range(5) for i in range(2)])
    assert all(d.duplicate for d in dups), "keys inside the horizon stay"
    (pending,) = await store.admit([user("t2", "pending")])
    assert pending.duplicate, "a pending input's key stays"
    (again,) = await store.admit([user("t0", "old0")])
    assert not again.duplicate, "a forgotten key is admitted again"


async def test_a_small_table_is_walked_whole_by_one_call(
    store: SQLiteStore, clock: FakeClock, tmp_path: Path
) -> None:
    for t in range(30):
        await consumed(store, f"t{t:02d}", ["a", "b"])
    clock.advance(8 * DAY)
    assert await store.prune_dedup_keys(before=clock.now - 7 * DAY, limit=500) == 60
    assert key_count(tmp_path / "x.db") == 0
