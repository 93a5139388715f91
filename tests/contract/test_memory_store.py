"""Memory operations on every store backend (ram, sqlite, postgres): scope, supersession,
rebind, paging.

Each test opens a fresh store of the contract backend on an event loop in a thread of
its own (as a runtime would run it) and drives a :class:`MemoryCore` over the store's
memory rows from the test's thread (as ``Memory`` does from a worker thread), with
the deterministic hashing embedder.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from dormant.errors import InvalidInput, NotFound, StoreError, UsageError
from dormant.memory import (
    DEFAULT_TENANT,
    FilterSpec,
    HashingEmbedder,
    MemoryConfig,
    MemoryCore,
    MemoryRecord,
    NewMemory,
    RecallMode,
    bind,
)
from dormant.store.base import Store
from dormant.store.postgres import PostgresStore
from dormant.store.sqlite import SQLiteStore
from tests.contract.conftest import Backend
from tests.helpers import KEY_SECRET, FakeClock

R = TypeVar("R")

T = DEFAULT_TENANT
T2 = "t00000000a002"  # another tenant (the core checks the shape; Memory looks it up)
ALICE = bind({"phone": "+15550100", "device": "alice-phone"}, secret=KEY_SECRET, tenant="")
# same phone, other device
BOB = bind({"phone": "+15550100", "device": "bob-tablet"}, secret=KEY_SECRET, tenant="")
NEW_DEVICE = bind({"phone": "+15550100", "device": "alice-new-phone"}, secret=KEY_SECRET, tenant="")


class LoopThread:
    """An event loop running in a thread of its own, where the store lives."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, R]) -> R:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=60)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


@pytest.fixture
def opened(backend: Backend, tmp_path: Path, clock: FakeClock) -> Iterator[tuple[LoopThread, Store]]:
    """A fresh, open store of the contract backend, on its own loop thread."""
    loops = LoopThread()
    store = backend.make(tmp_path, clock)
    loops.run(store.open())
    yield loops, store
    loops.run(store.close())
    loops.stop()


@pytest.fixture
def core(opened: tuple[LoopThread, Store]) -> Iterator[MemoryCore]:
    c = MemoryCore(opened[1].memory_rows(), HashingEmbedder(64))
    yield c
    c.flush()


def add(
    core: MemoryCore, subject: str, text: str, *, now: float = 1000.0, tenant: str = T, **kw: object
) -> str:
    return core.add(tenant, NewMemory(subject=subject, text=text, **kw), now=now).record.id  # type: ignore[arg-type]


def texts(core: MemoryCore, keys: list[str], query: str, **kw: object) -> list[str]:
    return [h.record.text for h in core.recall(T, keys, query, now=10_000.0, **kw).hits]  # type: ignore[arg-type]


def test_add_get_list_history_paged(core: MemoryCore) -> None:
    ids = [add(core, ALICE, f"fact number {i}", kind="fact", now=1000.0 + i) for i in range(7)]
    rec = core.get(T, [ALICE], ids[0])
    assert rec.text == "fact number 0" and rec.subject == ALICE and rec.invalid_at is None
    seen, cursor = [], None
    while True:
        page = core.list(T, [ALICE], cursor=cursor, limit=3)
        seen += [r.id for r in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == ids[::-1]
    hist = core.history(T, [ALICE], limit=5)
    assert [c.op for c in hist.items] == ["add"] * 5 and hist.next_cursor is not None
    rest = core.history(T, [ALICE], cursor=hist.next_cursor, limit=5)
    assert len(rest.items) == 2 and rest.next_cursor is None


def test_supersession_keeps_the_old_fact_for_history_and_at(core: MemoryCore) -> None:
    old = add(core, ALICE, "Ship to 12 Oak Street", tags={"key": "shipping_address"}, now=1000.0)
    new = add(core, ALICE, "Ship to 44 Pine Road", tags={"key": "shipping_address"}, now=2000.0)
    assert texts(core, [ALICE], "ship") == ["Ship to 44 Pine Road"]
    past = core.recall(T, [ALICE], "ship", at=1500.0, now=10_000.0)
    assert [h.record.id for h in past.hits] == [old]
    both = core.recall(T, [ALICE], "ship", history=True, now=10_000.0)
    assert {h.record.id for h in both.hits} == {old, new}
    assert core.get(T, [ALICE], old).invalid_at == 2000.0
    ops = [(c.op, c.record_id) for c in core.history(T, [ALICE]).items]
    assert ("supersede", old) in ops


def test_complaint_is_not_superseded_by_inquiry(core: MemoryCore) -> None:
    add(core, ALICE, "Complaint: ORD-7 arrived broken", tags={"key": "order:ORD-7", "type": "complaint"})
    add(core, ALICE, "Inquiry: where is ORD-7", tags={"key": "order:ORD-7", "type": "inquiry"}, now=2000.0)
    assert len(texts(core, [ALICE], "ORD-7")) == 2


def test_explicit_replace_and_dedup(core: MemoryCore) -> None:
    a = add(core, ALICE, "Likes tea", kind="preference")
    again = core.add(T, NewMemory(subject=ALICE, kind="preference", text="  likes   TEA "), now=1500.0)
    assert again.duplicate and again.record.id == a
    b = core.add(
        T, NewMemory(subject=ALICE, kind="preference", text="Likes coffee", replaces=(a,)), now=2000.0
    )
    assert b.superseded == (a,)
    # a record of another subject cannot be replaced
    c = core.add(T, NewMemory(subject=BOB, kind="preference", text="Likes juice", replaces=(b.record.id,)))
    assert c.superseded == ()
    assert core.get(T, [ALICE], b.record.id).invalid_at is None


def test_isolation_across_subjects_and_tenants(core: MemoryCore) -> None:
    secret = add(core, BOB, "Bob's secret: order ORD-9 refund for the red shoes")
    other_tenant = add(core, ALICE, "Alice in tenant two: red shoes", tenant=T2)
    add(core, ALICE, "Alice likes blue hats")
    for q in ("red shoes refund ORD-9", "secret", ""):
        got = core.recall(T, [ALICE], q, k=20, history=True, now=10_000.0).hits
        assert all(h.record.subject == ALICE and h.record.tenant == T for h in got)
    with pytest.raises(NotFound):
        core.get(T, [ALICE], secret)
    with pytest.raises(NotFound):
        core.get(T, [ALICE], other_tenant)
    with pytest.raises(NotFound):
        core.forget(T, [ALICE], secret)
    assert all(r.subject == ALICE for r in core.list(T, [ALICE], spec=FilterSpec(history=True)).items)
    assert core.history(T, [ALICE], record_id=secret).items == ()
    assert all(c.subject == ALICE for c in core.history(T, [ALICE]).items)
    assert core.get(T, [BOB], secret).text.startswith("Bob's")
    with pytest.raises(InvalidInput):
        core.recall(T, ["b1_%"], "x")
    # the other tenant sees its own record of the same key, and nothing of this tenant's
    for q in ("red shoes refund ORD-9", "blue hats", ""):
        got = core.recall(T2, [ALICE, BOB], q, k=20, history=True, now=10_000.0).hits
        assert [h.record.id for h in got] in ([], [other_tenant])
    with pytest.raises(NotFound):
        core.get(T2, [BOB], secret)
    assert [c.record_id for c in core.history(T2, [ALICE]).items] == [other_tenant]
    # a tenant is an id (never a name, never a pattern); a record's thread is of its tenant
    for bad in ("default", "acme", "t%", T2.upper()):
        with pytest.raises(InvalidInput):
            core.recall(bad, [ALICE], "x")
    with pytest.raises(InvalidInput, match="tenant"):
        add(core, ALICE, "from a thread of tenant two", thread=f"{T2}/chat-1")
    add(core, ALICE, "from tenant two's own thread", thread=f"{T2}/chat-1", tenant=T2)


def test_link_widens_and_unlink_narrows_the_scope(core: MemoryCore) -> None:
    add(core, BOB, "Bob's parcel was boxed")
    assert texts(core, [ALICE], "parcel") == []
    assert core.rebind(T, ALICE, BOB, mode="link") == 1
    assert texts(core, [ALICE], "parcel") == ["Bob's parcel was boxed"]
    assert core.rebind(T, ALICE, BOB, mode="unlink") == 1
    assert texts(core, [ALICE], "parcel") == []
    assert [c.op for c in core.history(T, [ALICE]).items] == ["link", "unlink"]


def test_partial_identity_lookup_goes_through_the_link_table(core: MemoryCore) -> None:
    keys = [core.bind(T, {"phone": "+1 555 0100", "device": f"d{i}"}) for i in range(5)]
    core.bind(T2, {"phone": "+1 555 0100", "device": "elsewhere"})
    seen: list[str] = []
    cursor = None
    while True:
        page = core.keys_for(T, "phone", "+15550100", cursor=cursor, limit=2)
        seen += page.items
        if (cursor := page.next_cursor) is None:
            break
    assert seen == sorted(keys)
    assert core.keys_for(T, "phone", "+15550199").items == ()


def test_forget_hides_but_keeps(core: MemoryCore) -> None:
    rid = add(core, ALICE, "Allergic to peanuts")
    core.forget(T, [ALICE], rid, reason="user asked", now=2000.0)
    assert texts(core, [ALICE], "peanuts") == []
    assert core.get(T, [ALICE], rid).invalid_at == 2000.0
    assert core.history(T, [ALICE], record_id=rid).items[-1].detail == "user asked"
    with pytest.raises(NotFound):
        core.forget(T, [ALICE], rid)


def test_filters_tags_typed_and_kinds(core: MemoryCore) -> None:
    add(core, ALICE, "severity three complaint", kind="event", tags={"sev": 3, "type": "complaint"})
    add(core, ALICE, "severity text complaint", kind="event", tags={"sev": "3"})
    add(core, ALICE, "a complaint fact", kind="fact", tags={"flag": True})
    assert texts(core, [ALICE], "complaint", tags={"sev": 3}) == ["severity three complaint"]
    assert texts(core, [ALICE], "complaint", tags={"flag": True}) == ["a complaint fact"]
    assert texts(core, [ALICE], "complaint", tags={"flag": False}) == []
    assert sorted(texts(core, [ALICE], "complaint", kinds=["event"])) == [
        "severity text complaint",
        "severity three complaint",
    ]


def test_dictionary_expands_text_queries(core: MemoryCore) -> None:
    add(core, ALICE, "Order ORD-5 was dispatched on Monday")
    # structure off: no fallback to recency when text finds nothing
    text_only = RecallMode(vector=False, structure=False)
    assert texts(core, [ALICE], "has it shipped", mode=text_only) == []
    assert core.save_dictionary(T, [["shipped", "dispatched", "out for delivery"]]) == 1
    assert texts(core, [ALICE], "has it shipped", mode=text_only) == ["Order ORD-5 was dispatched on Monday"]
    without = RecallMode(vector=False, dictionary=False, structure=False)
    assert texts(core, [ALICE], "has it shipped", mode=without) == []


def test_dictionary_pulls_the_query_and_only_if_asked_the_records(core: MemoryCore) -> None:
    """By default a record's stored vector is its text's own (only a query that names a
    group is pulled); ``pull_records=True`` stores the pulled vector."""
    emb = HashingEmbedder(64)
    core.save_dictionary(T, [["shipped", "dispatched"]])
    plain = add(core, ALICE, "Order ORD-5 was dispatched on Monday")
    assert core.get(T, [ALICE], plain, with_vector=True).embedding == pytest.approx(
        emb.embed(["Order ORD-5 was dispatched on Monday"])[0], abs=1e-6
    )
    pulling = MemoryCore(core.backend, emb, MemoryConfig(pull_records=True))
    pulled = pulling.add(T, NewMemory(subject=BOB, text="Order ORD-6 was dispatched"), now=1.0).record.id
    stored = core.get(T, [BOB], pulled, with_vector=True).embedding
    assert stored is not None
    assert stored != pytest.approx(emb.embed(["Order ORD-6 was dispatched"])[0], abs=1e-3)
    assert stored == pytest.approx(
        pulling.dictionary(T).pull(
            "Order ORD-6 was dispatched", emb.embed(["Order ORD-6 was dispatched"])[0], emb.embed
        ),
        abs=1e-5,
    )


def test_cjk_recall(core: MemoryCore) -> None:
    add(core, ALICE, "我的配送地址是北京市朝阳区")
    add(core, ALICE, "我喜欢绿茶")
    assert texts(core, [ALICE], "配送地址", mode=RecallMode(vector=False)) == ["我的配送地址是北京市朝阳区"]


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_without_the_vector_extension_recall_degrades_and_says_so(
    dialect: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    loops = LoopThread()
    store: Store
    if dialect == "sqlite":  # as if sqlite-vec could not be loaded
        monkeypatch.setattr("dormant.store.sqlite.memory.rows.load_vector_extension", lambda conn: False)
        store = SQLiteStore(f"sqlite:///{tmp_path}/nv.db")
    else:
        store = PostgresStore(request.getfixturevalue("pg_url"), vectors=False, pool_size=2)
    loops.run(store.open())
    try:
        core = MemoryCore(store.memory_rows(), HashingEmbedder(64))
        add(core, ALICE, "the parcel was boxed")
        out = core.recall(T, [ALICE], "parcel", now=10_000.0)
        assert [h.record.text for h in out.hits] == ["the parcel was boxed"]
        assert out.degraded and "vector" in out.degraded[0]
    finally:
        loops.run(store.close())
        loops.stop()


def test_vectors_find_records_without_shared_words(core: MemoryCore) -> None:
    add(core, ALICE, "zebra crossing")
    out = core.recall(T, [ALICE], "zebras", now=10_000.0, mode=RecallMode(text=False))
    assert out.hits and out.hits[0].vector_rank == 1 and out.degraded == ()


def test_rebind_under_concurrent_writes_loses_nothing(core: MemoryCore) -> None:
    for i in range(20):
        add(core, ALICE, f"early memory {i}")
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for i in range(30):
                add(core, ALICE, f"writer {w} memory {i}", now=2000.0 + i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    moved = core.rebind(T, ALICE, NEW_DEVICE, mode="move")
    for t in threads:
        t.join()
    assert not errors
    assert moved >= 20
    # every write, before or after the move, ends under the new key; none is left behind
    everything: list[MemoryRecord] = []
    cursor = None
    while True:
        page = core.list(T, [NEW_DEVICE], cursor=cursor, limit=100)
        everything += page.items
        if (cursor := page.next_cursor) is None:
            break
    assert len(everything) == 20 + 90
    assert {r.subject for r in everything} == {NEW_DEVICE}
    assert len(texts(core, [NEW_DEVICE], "writer memory", k=100)) > 0
    # the old key still reads (through the move) the same records, and the moves are audited
    assert len(core.list(T, [ALICE], limit=500).items) == 110
    assert sum(c.op == "rebind" for c in core.history(T, [NEW_DEVICE], limit=500).items) == moved
    assert texts(core, [BOB], "memory") == []


def test_memory_writes_are_the_store_writers_commits(tmp_path: Path) -> None:
    """A memory write is a job of the store's group-committing writer, in the store's file."""
    loops = LoopThread()
    store = SQLiteStore(f"sqlite:///{tmp_path}/one.db")
    loops.run(store.open())
    try:
        core = MemoryCore(store.memory_rows(), HashingEmbedder(64))
        add(core, ALICE, "the first add also records the embedder")
        before = store.commits
        add(core, ALICE, "the parcel was boxed")
        assert store.commits == before + 1
    finally:
        loops.run(store.close())
        loops.stop()
    # the record is in the store's own file, readable by a store opened again
    loops = LoopThread()
    again = SQLiteStore(f"sqlite:///{tmp_path}/one.db")
    loops.run(again.open())
    try:
        reopened = MemoryCore(again.memory_rows(), HashingEmbedder(64))
        assert texts(reopened, [ALICE], "parcel", mode=RecallMode(vector=False)) == ["the parcel was boxed"]
    finally:
        loops.run(again.close())
        loops.stop()


async def test_memory_rows_refuse_the_stores_own_event_loop(tmp_path: Path) -> None:
    """Called on the loop the store runs on, a memory operation raises instead of deadlocking."""
    store = SQLiteStore(f"sqlite:///{tmp_path}/loop.db")
    await store.open()
    try:
        core = MemoryCore(store.memory_rows(), HashingEmbedder(64))
        with pytest.raises(UsageError, match="worker thread"):
            add(core, ALICE, "blocked")
        assert (await asyncio.to_thread(add, core, ALICE, "fine")) != ""
    finally:
        await store.close()


def test_small_scopes_rank_by_bm25_over_their_rows_like_fts5(
    core: MemoryCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scope under the row limit is ranked by BM25 over its rows (SQLite); forced onto
    FTS5 the same records come back in the same order."""
    add(core, ALICE, "the parcel was shipped on Monday")
    add(core, ALICE, "parcel parcel: shipped twice, shipping again")
    add(core, ALICE, "green tea please")
    add(core, BOB, "the parcel was shipped")  # another subject: never in Alice's results
    text_only = RecallMode(vector=False)
    from dormant.memory import bm25
    from dormant.store.sqlite.memory import rows as sqlite_memory
    from dormant.store.sqlite.memory import search as memory_search

    calls: list[int] = []
    real = bm25.scores

    def counted(docs: Any, phrases: Any) -> list[float | None]:
        calls.append(len(docs))
        return real(docs, phrases)

    monkeypatch.setattr(memory_search, "bm25_scores", counted)
    scoped = texts(core, [ALICE], "shipping parcel", mode=text_only)
    assert scoped == ["parcel parcel: shipped twice, shipping again", "the parcel was shipped on Monday"]
    if isinstance(core.backend, sqlite_memory.SQLiteMemoryBackend):
        assert calls == [3]  # Alice's three rows were scored, nothing else was read
        monkeypatch.setattr(memory_search, "SCOPED_TEXT_ROWS", 0)
        assert texts(core, [ALICE], "shipping parcel", mode=text_only) == scoped
        assert calls == [3]  # FTS5 ranked this time


def test_postgres_memory_is_the_stores_own_tables_and_pool(request: pytest.FixtureRequest) -> None:
    """On PostgreSQL memory's rows are tables of the store's schema (its migrations, no
    runner of memory's own) reached through the store's pool: closed with the store."""
    import psycopg

    url = request.getfixturevalue("pg_url")
    loops = LoopThread()
    store = PostgresStore(url, pool_size=2)
    loops.run(store.open())
    try:
        core = MemoryCore(store.memory_rows(), HashingEmbedder(64))
        add(core, ALICE, "the parcel was boxed")
        assert store.memory_rows().vector_available  # the embedded server ships pgvector
    finally:
        loops.run(store.close())
        loops.stop()
    with pytest.raises(StoreError, match="not open"):
        core.recall(T, [ALICE], "parcel")
    with psycopg.connect(url) as conn:
        schema = conn.execute("SELECT current_schema()").fetchone()
        tables = {
            name
            for (name,) in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            )
        }
        assert schema is not None and "memory_records" in tables and "memory_schema" not in tables
        assert conn.execute("SELECT count(*) FROM memory_records").fetchone() == (1,)
        # the extension lives in public: the store's schema stays dumpable and droppable alone
        assert conn.execute(
            "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
            "WHERE e.extname = 'vector'"
        ).fetchone() == ("public",)
        assert conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = 'memory_records' AND column_name = 'embedding'"
        ).fetchall() == [("embedding",)]


def test_keys_are_keyed_by_the_stores_secret_and_the_tenant(opened: tuple[LoopThread, Store]) -> None:
    core = MemoryCore(opened[1].memory_rows(), None)
    phone = {"phone": "+1 555 0100"}
    key = core.bind(T, phone)
    assert key.startswith("b2_") and key == core.bind(T, phone) == core.key(T, phone)
    assert core.bind(T2, phone) != key, "the same phone in another tenant: another key"
    # the store's own secret (made with the store) is kept: another core over it agrees
    assert MemoryCore(opened[1].memory_rows(), None).bind(T, phone) == key
    other = MemoryCore(opened[1].memory_rows(), None, MemoryConfig(binding_secret="x" * 32))
    assert other.bind(T, phone) != key
    with pytest.raises(InvalidInput, match="at least 32"):
        MemoryCore(opened[1].memory_rows(), None, MemoryConfig(binding_secret="short")).bind(T, phone)


def test_rotating_the_secret_moves_each_key_when_its_identity_is_bound(
    opened: tuple[LoopThread, Store],
) -> None:
    rows = opened[1].memory_rows()
    alice = {"phone": "+1 555 0100", "device": "a"}
    before = MemoryCore(rows, None, MemoryConfig(binding_secret="1" * 32))
    old = before.bind(T, alice)
    bob = before.bind(T, {"phone": "+1 555 0100", "device": "b"})
    add(before, old, "prefers email", now=1000.0)
    add(before, old, "ships to 1 Main Street", tags={"key": "address"}, now=1001.0)
    add(before, old, "ships to 2 Oak Avenue", tags={"key": "address"}, now=1002.0)
    before.rebind(T, old, bob, mode="link")
    after = MemoryCore(rows, None, MemoryConfig(binding_secret="2" * 32, previous_binding_secret="1" * 32))
    new = after.bind(T, alice)
    assert new != old
    kept = after.list(T, [new], spec=FilterSpec(history=True), limit=10).items
    assert sorted(r.text for r in kept) == [
        "prefers email",
        "ships to 1 Main Street",
        "ships to 2 Oak Avenue",
    ]
    ops = [c.op for c in after.history(T, [new], limit=50).items]
    assert ops.count("add") == 3 and "supersede" in ops and "rebind" in ops
    assert bob in after.scope(T, [new]), "its links follow"
    assert after.keys_for(T, "device", "a").items == (new,)
    assert after.bind(T, alice) == new
    assert len(after.list(T, [new], spec=FilterSpec(history=True), limit=10).items) == 3
