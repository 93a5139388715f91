"""Contract: blobs (stored once by content, read by range, visible along a lineage,
collected with their threads) and thread deletion."""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dormant.errors import InvalidInput, NotFound, UsageError
from dormant.records import NewThread
from dormant.store.base import Store
from dormant.store.postgres import PostgresStore
from dormant.store.sqlite import SQLiteStore
from dormant.tools.blobs import CHUNK_BYTES, MAX_READ, TMP_TTL_S, tmp_ref
from tests.helpers import FakeClock

from .conftest import Backend
from .support import LEASE, call, claim, pending_inputs, take, turn, user

SIZE = 3 * CHUNK_BYTES + 1234


def payload(size: int = SIZE, seed: int = 7) -> bytes:
    return random.Random(seed).randbytes(size)


async def pieces(data: bytes, step: int = 100_003) -> AsyncIterator[bytes]:
    """``data`` in odd-sized pieces, yielding to the loop between them."""
    for start in range(0, len(data), step):
        await asyncio.sleep(0)
        yield data[start : start + step]


def ref_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


async def layout(store: Store) -> tuple[int, int, int]:
    """(blobs, chunks, references) as stored, whatever the backend (a peek inside)."""
    sql = (
        "SELECT (SELECT count(*) FROM blobs), (SELECT count(*) FROM blob_chunks), "
        "(SELECT count(*) FROM blob_refs)"
    )
    if isinstance(store, SQLiteStore):
        row = store.backend._read().execute(sql).fetchone()
    else:
        assert isinstance(store, PostgresStore)
        async with store.backend._reads().connection() as conn:
            row = await (await conn.execute(sql)).fetchone()
    return int(row[0]), int(row[1]), int(row[2])


async def plant_chunks(store: Store, ref: str, count: int) -> None:
    """Chunks under ``ref`` as a write that never finished leaves them."""
    rows = [(ref, idx, b"x" * 1000) for idx in range(count)]
    if isinstance(store, SQLiteStore):
        await store.backend._write(
            lambda conn: conn.executemany("INSERT INTO blob_chunks VALUES (NULL, ?, ?, ?)", rows)
        )
        return
    assert isinstance(store, PostgresStore)
    async with store.backend._reads().connection() as conn, conn.cursor() as cursor:
        await cursor.executemany("INSERT INTO blob_chunks (ref, idx, data) VALUES (%s, %s, %b)", rows)


# -- writing and reading ------------------------------------------------------------


async def test_a_blob_is_stored_by_content_and_read_by_range_across_chunks(store: Store) -> None:
    await turn(store, "t1", "k1")
    data = payload()
    blob = await store.put_blob("t1", pieces(data))
    assert (blob.ref, blob.size) == (ref_of(data), SIZE)
    assert await store.get_blob("t1", blob.ref) == blob
    ranges = [
        (0, 10),
        (CHUNK_BYTES - 5, 10),  # across one boundary
        (2 * CHUNK_BYTES - 1, CHUNK_BYTES + 2),  # three chunks
        (SIZE - 3, 100),  # cut at the end
        (SIZE, 10),  # at the end
        (SIZE + 100, 10),  # past it
        (5, 0),
    ]
    read = 0
    for offset, length in ranges:
        got = await store.read_blob("t1", blob.ref, offset, length)
        assert got == data[offset : offset + length], (offset, length)
        read += len(got)
    assert store.blob_read_bytes == read
    assert await store.read_blob("t1", blob.ref) == data[:65536]
    capped = await store.read_blob("t1", blob.ref, 0, 5 * MAX_READ)
    assert capped == data[:MAX_READ]


async def test_bad_ranges_and_unknown_refs(store: Store) -> None:
    await turn(store, "t1", "k1")
    blob = await store.put_blob("t1", [b"hello"])
    with pytest.raises(UsageError):
        await store.read_blob("t1", blob.ref, -1, 10)
    with pytest.raises(UsageError):
        await store.read_blob("t1", blob.ref, 0, -1)
    with pytest.raises(NotFound):
        await store.read_blob("t1", ref_of(b"other"), 0, 10)
    with pytest.raises(NotFound):
        await store.get_blob("t1", "not a ref")
    with pytest.raises(NotFound):
        await store.read_blob("nobody", blob.ref, 0, 10)


async def test_pieces_of_any_size_sync_or_async_make_the_same_blob(store: Store) -> None:
    await turn(store, "t1", "k1")
    data = payload(CHUNK_BYTES * 2, seed=3)
    one = await store.put_blob("t1", [data])
    tiny = await store.put_blob("t1", (data[i : i + 7] for i in range(0, len(data), 7)))
    mixed = await store.put_blob("t1", pieces(data, step=CHUNK_BYTES + 1))
    assert one == tiny == mixed
    assert await layout(store) == (1, 2, 1)
    assert await store.read_blob("t1", one.ref, CHUNK_BYTES - 2, 4) == data[CHUNK_BYTES - 2 : CHUNK_BYTES + 2]


async def test_empty_blob(store: Store) -> None:
    await turn(store, "t1", "k1")
    blob = await store.put_blob("t1", [])
    assert (blob.ref, blob.size) == (ref_of(b""), 0)
    assert await store.read_blob("t1", blob.ref, 0, 10) == b""


async def test_same_bytes_twice_are_one_blob_referred_to_by_both_threads(store: Store) -> None:
    await turn(store, "t1", "k1")
    await turn(store, "t2", "k1")
    data = payload()
    first = await store.put_blob("t1", pieces(data))
    second = await store.put_blob("t2", [data])
    assert first == second
    assert await layout(store) == (1, 4, 2)
    assert await store.read_blob("t2", first.ref, SIZE - 10, 10) == data[-10:]


async def test_concurrent_puts_of_the_same_bytes_store_one_blob(store: Store) -> None:
    for t in ("t1", "t2", "t3"):
        await turn(store, t, "k1")
    data = payload()
    results = await asyncio.gather(*(store.put_blob(t, pieces(data, 50_000)) for t in ("t1", "t2", "t3")))
    assert {r.ref for r in results} == {ref_of(data)}
    assert await layout(store) == (1, 4, 3)
    for t in ("t1", "t2", "t3"):
        assert await store.read_blob(t, ref_of(data), CHUNK_BYTES, 10) == data[CHUNK_BYTES : CHUNK_BYTES + 10]


async def test_put_blob_needs_the_thread_and_a_failed_put_leaves_nothing(store: Store) -> None:
    with pytest.raises(NotFound):
        await store.put_blob("nobody", [b"x" * 100])
    await turn(store, "t1", "k1")

    async def broken() -> AsyncIterator[bytes]:
        yield payload(3 * CHUNK_BYTES)
        yield payload(5 * 1024 * 1024)  # written in more than one batch before it fails
        raise RuntimeError("the tool died")

    with pytest.raises(RuntimeError, match="the tool died"):
        await store.put_blob("t1", broken())
    assert await layout(store) == (0, 0, 0)


async def test_blobs_are_durable(backend: Backend, store: Store, tmp_path: Path, clock: FakeClock) -> None:
    if not backend.durable:
        pytest.skip(f"the {backend.name} store is not durable by design")
    await turn(store, "t1", "k1")
    data = payload()
    blob = await store.put_blob("t1", [data])
    await store.close()
    reopened = backend.make(tmp_path, clock)
    await reopened.open()
    try:
        assert await reopened.read_blob("t1", blob.ref, CHUNK_BYTES * 3, 2000) == data[CHUNK_BYTES * 3 :]
    finally:
        await reopened.close()
        await store.open()


# -- who may read -------------------------------------------------------------------


async def test_a_thread_reads_its_ancestors_blobs_and_no_one_elses(store: Store) -> None:
    await turn(store, "p", "k1", threads=[NewThread(id="p/c", agent="a", parent_id="p", parent_seq=1)])
    await turn(store, "p/c", "k1", threads=[NewThread(id="p/c/g", agent="a", parent_id="p/c", parent_seq=1)])
    await turn(store, "other", "k1")
    mine = await store.put_blob("p", [b"the parent's output"])
    childs = await store.put_blob("p/c", [b"the child's output"])
    assert await store.read_blob("p/c/g", mine.ref, 4, 6) == b"parent"
    assert await store.read_blob("p/c/g", childs.ref) == b"the child's output"
    assert (await store.get_blob("p/c", mine.ref)).size == len(b"the parent's output")
    for reader, ref in (("other", mine.ref), ("p", childs.ref)):
        with pytest.raises(NotFound):
            await store.read_blob(reader, ref)
        with pytest.raises(NotFound):
            await store.get_blob(reader, ref)


# -- deleting threads ---------------------------------------------------------------


async def test_delete_thread_takes_its_descendants_and_only_unreferenced_blobs(store: Store) -> None:
    await turn(store, "p", "k1", threads=[NewThread(id="p/c", agent="a", parent_id="p", parent_seq=1)])
    await turn(store, "p/c", "k1", threads=[NewThread(id="p/c/g", agent="a", parent_id="p/c", parent_seq=1)])
    await turn(store, "p/c/g", "k1", calls=[call("c1")])  # an open call in the outbox
    await store.admit([user("p/c", "k2")])  # a pending input
    await turn(store, "u", "k1")
    shared, only_p, only_g = payload(seed=1), payload(seed=2), payload(seed=3)
    await store.put_blob("p", [shared])
    await store.put_blob("u", [shared])
    await store.put_blob("p", [only_p])
    await store.put_blob("p/c/g", [only_g])
    assert await layout(store) == (3, 12, 4)

    assert await store.delete_thread("p") == 3
    for gone in ("p", "p/c", "p/c/g"):
        with pytest.raises(NotFound):
            await store.get_thread(gone)
        with pytest.raises(NotFound):
            await store.history(gone)
    assert await layout(store) == (1, 4, 1)
    assert await store.read_blob("u", ref_of(shared), 0, 5) == shared[:5]
    assert (await store.history("u")).items[0].content == "text of k1"
    outbox = await store.list_outbox()
    assert [e.thread_id for e in outbox.items] == []
    status = await store.status()
    assert status.threads_by_status == {"active": 1} and status.backlog_by_priority == {}

    # the id is free again: a new thread, with no memory of the old one's dedup keys
    (again,) = await store.admit([user("p", "k1", "fresh")])
    assert not again.duplicate
    assert await pending_inputs(store, "p") == ["k1"]
    assert (await store.get_thread("p")).last_seq == 0

    assert await store.delete_thread("u") == 1
    assert await layout(store) == (0, 0, 0)


async def test_delete_thread_refuses_while_a_slice_runs(store: Store, clock: FakeClock) -> None:
    await turn(store, "p", "k1", threads=[NewThread(id="p/c", agent="a", parent_id="p", parent_seq=1)])
    await store.admit([user("p/c", "k2")])
    running = await claim(store, "p/c")
    with pytest.raises(InvalidInput):
        await store.delete_thread("p")
    await store.get_thread("p")
    await store.get_thread("p/c")
    await store.release(running)
    assert await store.delete_thread("p") == 2


async def test_an_expired_lease_does_not_block_deletion(store: Store, clock: FakeClock) -> None:
    await store.admit([user("t1", "k1")])
    await take(store, "t1")  # a worker that died holding the lease
    with pytest.raises(InvalidInput):
        await store.delete_thread("t1")
    clock.advance(LEASE + 1)
    assert await store.delete_thread("t1") == 1


async def test_delete_a_missing_thread(store: Store) -> None:
    with pytest.raises(NotFound):
        await store.delete_thread("nobody")


# -- writes that never finished -----------------------------------------------------


async def test_chunks_of_writes_that_never_finished_are_swept_after_an_hour(
    store: Store, clock: FakeClock
) -> None:
    stale, young = tmp_ref(clock.now - TMP_TTL_S - 5), tmp_ref(clock.now - 60)
    await plant_chunks(store, stale, 3)
    await plant_chunks(store, young, 2)
    await turn(store, "t1", "k1")
    await store.put_blob("t1", [b"a blob of its own"])
    assert await store.sweep_blobs() == 3  # opening a store sweeps too; this one was opened before
    assert await layout(store) == (1, 1 + 2, 1)
    clock.advance(TMP_TTL_S)
    assert await store.sweep_blobs() == 2
    assert await layout(store) == (1, 1, 1)


async def test_sqlite_sweeps_moves_that_never_finished(store: Store, clock: FakeClock) -> None:
    if not isinstance(store, SQLiteStore):
        pytest.skip("only the SQLite store moves a new blob's chunks in several transactions")
    ref = ref_of(b"never completed")
    await plant_chunks(store, ref, 2)
    created = clock.now - TMP_TTL_S - 5
    await store.backend._write(
        lambda conn: conn.execute("INSERT INTO blobs VALUES (?, -1, ?, ?)", (ref, CHUNK_BYTES, created))
    )
    await turn(store, "t1", "k1")
    with pytest.raises(NotFound):  # a move in progress is invisible
        await store.get_blob("t1", ref)
    assert await store.sweep_blobs() == 2
    assert await layout(store) == (0, 0, 0)


async def test_sqlite_a_put_adopts_a_move_that_never_finished(store: Store, clock: FakeClock) -> None:
    if not isinstance(store, SQLiteStore):
        pytest.skip("only the SQLite store moves a new blob's chunks in several transactions")
    data = payload()
    ref = ref_of(data)
    # a crashed put had moved two of the four chunks
    rows = [(ref, idx, data[idx * CHUNK_BYTES : (idx + 1) * CHUNK_BYTES]) for idx in (0, 2)]
    await store.backend._write(
        lambda conn: conn.executemany("INSERT INTO blob_chunks VALUES (NULL, ?, ?, ?)", rows)
    )
    await store.backend._write(
        lambda conn: conn.execute("INSERT INTO blobs VALUES (?, -1, ?, ?)", (ref, CHUNK_BYTES, 0))
    )
    await turn(store, "t1", "k1")
    blob = await store.put_blob("t1", pieces(data))
    assert blob.ref == ref
    assert await layout(store) == (1, 4, 1)
    assert await store.read_blob("t1", ref, 0, MAX_READ) == data


def test_tmp_refs_sort_by_age() -> None:
    refs = [tmp_ref(t) for t in (5.0, 1_700_000_000.0, 99_999_999_999.0)]
    assert refs == sorted(refs)
    assert all(r.startswith("tmp:") for r in refs)
