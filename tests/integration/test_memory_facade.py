"""The async ``Memory`` API (what ``rt.memory`` will be) on a SQLite file."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from dormant.errors import NotFound
from dormant.memory import HashingEmbedder, Memory, NewMemory


async def test_memory_api_end_to_end(tmp_path: Path) -> None:
    async with await Memory.open(f"sqlite:///{tmp_path}/m.db", embedder=HashingEmbedder(64)) as mem:
        alice = await mem.bind({"phone": "+1 555 0100", "device": "a"})
        bob = await mem.bind({"phone": "+15550100", "device": "b"})
        assert (await mem.keys_for("phone", "+15550100")).items == tuple(sorted([alice, bob]))
        assert await mem.load_dictionary([["shipped", "dispatched"]]) == 1
        first = await mem.add(alice, "Order ORD-1 was dispatched", kind="event", tags={"order": "ORD-1"})
        await mem.add(bob, "Bob's order ORD-2 was dispatched", kind="event")
        # many recalls at once, all off the event loop
        results = await asyncio.gather(*(mem.recall([alice], "was it shipped") for _ in range(8)))
        assert all([h.record.id for h in r.hits] == [first.record.id] for r in results)
        assert (await mem.get([alice], first.record.id)).text == "Order ORD-1 was dispatched"
        with pytest.raises(NotFound):
            await mem.get([bob], first.record.id)
        page = await mem.list([alice], limit=1)
        assert [r.id for r in page.items] == [first.record.id] and page.next_cursor is None
        await mem.forget([alice], first.record.id, reason="test")
        assert (await mem.recall([alice], "shipped")).hits == ()
        assert [c.op for c in (await mem.history([alice])).items] == ["add", "forget"]
        assert await mem.rebind(bob, alice, mode="merge") == 1
        assert [h.record.text for h in (await mem.recall([alice], "dispatched")).hits] == [
            "Bob's order ORD-2 was dispatched"
        ]
    # access counts were written at close
    async with await Memory.open(f"sqlite:///{tmp_path}/m.db", embedder=HashingEmbedder(64)) as again:
        rec = await again.get([alice], first.record.id)
        assert rec.access_count == 8 and rec.last_access_at is not None


def _vec_index(path: Path) -> bool:
    import apsw

    conn = apsw.Connection(str(path))
    try:
        row = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE name = 'memory_vec_chunks_partition'"
        ).fetchone()
        return row is not None
    finally:
        conn.close()


async def test_vector_table_has_a_partition_index_and_older_files_get_it(tmp_path: Path) -> None:
    """sqlite-vec looks a subject's chunks up by partition: without this index every
    scoped KNN scanned every subject's chunk rows (its cost grew with the table)."""
    import apsw

    db = tmp_path / "m.db"
    async with await Memory.open(f"sqlite:///{db}", embedder=HashingEmbedder(16)) as mem:
        key = await mem.bind({"phone": "1"})
        await mem.add(key, "Order ORD-1 was dispatched", kind="event")
    assert _vec_index(db)
    conn = apsw.Connection(str(db))
    conn.execute("DROP INDEX memory_vec_chunks_partition")  # a file made before the index
    conn.close()
    assert not _vec_index(db)
    async with await Memory.open(f"sqlite:///{db}", embedder=HashingEmbedder(16)) as mem:
        assert [h.record.text for h in (await mem.recall([key], "dispatched")).hits] == [
            "Order ORD-1 was dispatched"
        ]
    assert _vec_index(db)


def test_reads_of_a_file_store_do_not_wait_for_its_event_loop(tmp_path: Path) -> None:
    """A recall reads on memory's own connection in the worker thread: a store loop busy
    with something else (a slice, say) does not hold it up."""
    import threading
    import time

    from dormant.memory import MemoryCore
    from dormant.memory.blocking import blocking
    from dormant.store.sqlite import SQLiteStore

    with blocking(SQLiteStore(f"sqlite:///{tmp_path}/m.db")) as (store, loops):
        core = MemoryCore(store.memory_rows(), HashingEmbedder(16))
        key = core.bind("", {"phone": "1"})
        core.add("", NewMemory(subject=key, text="Order ORD-1 was dispatched", kind="event"))
        busy, release = threading.Event(), threading.Event()

        async def hog() -> None:
            busy.set()
            release.wait(10)  # blocks the loop's thread

        done = asyncio.run_coroutine_threadsafe(hog(), loops.loop)
        assert busy.wait(10)
        try:
            started = time.monotonic()
            hits = core.recall("", [key], "dispatched").hits
            assert time.monotonic() - started < 5
            assert [h.record.text for h in hits] == ["Order ORD-1 was dispatched"]
        finally:
            release.set()
            done.result(10)


async def test_text_only_by_name_identity_parts_times_explain_and_the_dictionary_read_back() -> None:
    from dormant.errors import InvalidInput

    ana = {"phone": "+1 555 0199", "device": "ana-phone"}
    async with await Memory.open("memory://", embedder="none") as mem:
        assert mem.core.embedder is None and mem.status().embedder is None
        await mem.load_dictionary([["快递停滞", "物流异常"]])
        assert await mem.dictionary() == [["快递停滞", "物流异常"]]
        tag = {"key": "shipping_address"}
        now = await mem.add(ana, "Ship to 9 Mill Lane, Kingston", tags=tag, valid_from=3000.0)
        old = await mem.add(
            ana, "Ship to 12 Oak Street, Dover", tags=tag, valid_from=1000.0, observed_at=4000.0
        )
        assert old.record.invalid_at == 3000.0 and old.record.created_at == 4000.0 and not old.superseded
        key = await mem.bind(ana)
        assert now.record.subject == key
        got = await mem.recall(ana, "Which city should the parcel go to?", explain=True)
        assert got.hits[0].record.id == now.record.id and got.hits[0].explain is not None
        past = await mem.recall(ana, "Which city should the parcel go to?", at=2000.0, now=9000.0)
        assert past.hits[0].record.id == old.record.id
        assert [r.id for r in (await mem.list(ana)).items] == [now.record.id], "valid records only"
        with pytest.raises(InvalidInput, match="key tag"):
            await mem.add(key, "called us", kind="event", tags={"key": "call"})
    with pytest.raises(Exception, match="unknown embedder"):
        await Memory.open("memory://", embedder="bert")  # type: ignore[arg-type]
