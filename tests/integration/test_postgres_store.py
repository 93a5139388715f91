"""PostgreSQL-only behaviour: wake-up hints between processes, batches in which one
job fails, a writer whose connection is cut."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import psycopg
import pytest

from dormant.bench.scale import load_waves, run_scale
from dormant.errors import InvalidInput, LeaseLost, StoreError
from dormant.records import CommitPlan, Message, NewCall, NewInput, OutboxOutcome
from dormant.store.postgres import PostgresStore
from tests.helpers import eventually
from tests.pg import PgServer


def user(thread_id: str, key: str) -> NewInput:
    return NewInput(thread_id=thread_id, kind="user", dedup_key=key, content=f"text {key}", agent="a")


async def test_another_process_admitting_wakes_subscribers(pg: PgServer, pg_url: str) -> None:
    a, b = PostgresStore(pg_url, pool_size=1), PostgresStore(pg_url, pool_size=1)
    elsewhere = PostgresStore(pg.fresh_url("elsewhere"), pool_size=1)  # same database, other schema
    await a.open()
    await b.open()
    await elsewhere.open()
    heard: list[str] = []
    assert a.subscribe(heard.append)
    try:
        await asyncio.sleep(0.2)  # the listener connects in the background
        await a.admit([user("t1", "own")])
        await elsewhere.admit([user("t9", "k1")])  # notified before b's: heard first if at all
        await b.admit([user("t2", "k1")])

        async def woken() -> bool:
            return "threads" in heard

        await eventually(woken, timeout=5)
        assert heard.count("threads") == 1, "a store ignores its own hints and other schemas'"
    finally:
        await a.close()
        await b.close()
        await elsewhere.close()


async def test_a_failing_job_fails_alone_in_its_batch(pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=1)
    await store.open()
    try:
        await store.admit([user("t1", "k1")])
        (claim,) = await store.claim_threads("w", 1, 30.0)
        forged = CommitPlan(thread_id="t1", token="forged", consumed=(), messages=())
        results = await asyncio.gather(
            store.admit([user("t2", "k1")]),
            store.commit_slice(forged),
            store.admit([user("t3", "k1")]),
            return_exceptions=True,
        )
        assert isinstance(results[1], LeaseLost)
        assert not isinstance(results[0], BaseException) and not isinstance(results[2], BaseException)
        assert {t.id for t in (await store.list_threads()).items} == {"t1", "t2", "t3"}
        await store.commit_slice(CommitPlan(thread_id="t1", token=claim.token, consumed=(), messages=()))
    finally:
        await store.close()


async def test_a_nul_in_a_plan_is_refused_alone_and_changes_nothing(pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=1)
    await store.open()
    try:
        await store.admit([user("t1", "k1")])
        (claim,) = await store.claim_threads("w", 1, 30.0)
        reply = Message(seq=1, role="assistant", content="a\x00b")  # jsonb cannot hold \u0000
        bad = CommitPlan(thread_id="t1", token=claim.token, consumed=(), messages=(reply,))
        results = await asyncio.gather(
            store.admit([user("t2", "k1")]),
            store.commit_slice(bad),
            store.admit([user("t3", "k1")]),
            return_exceptions=True,
        )
        assert isinstance(results[1], InvalidInput) and "NUL" in str(results[1])
        assert not isinstance(results[0], BaseException) and not isinstance(results[2], BaseException)
        assert (await store.get_thread("t1")).last_seq == 0
        clean = msgspec.structs.replace(reply, content="a b")
        await store.commit_slice(msgspec.structs.replace(bad, messages=(clean,)))  # the lease held
        assert (await store.get_thread("t1")).last_seq == 1
    finally:
        await store.close()


async def test_error_texts_with_nul_are_kept_with_the_nul_replaced(pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=1)
    await store.open()
    try:
        await store.admit([user("t1", "k1")])
        (claim,) = await store.claim_threads("w", 1, 30.0)
        await store.release(claim, error="tool said \x00")  # diagnostics, not content
        assert (await store.get_thread("t1")).error == "tool said \ufffd"
        (claim,) = await store.claim_threads("w", 1, 30.0)
        call = NewCall(call_id="c1", tool="f", arguments="{}")
        await store.commit_slice(
            CommitPlan(thread_id="t1", token=claim.token, consumed=(), messages=(), calls=(call,), awaiting=1)
        )
        (entry,) = await store.claim_outbox("w", 1, 30.0)
        retry = OutboxOutcome(entry_id=entry.id, token=entry.token or "", kind="retry", error="\x00")
        assert await store.finish_outbox([retry]) == [True]
        (listed,) = (await store.list_outbox()).items
        assert listed.last_error == "\ufffd"
    finally:
        await store.close()


async def test_the_writer_reconnects_after_its_connection_is_cut(pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=1)
    await store.open()
    try:
        await store.admit([user("t1", "k1")])
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'dormant' AND pid <> pg_backend_pid() "
                "AND query NOT ILIKE '%%LISTEN%%' AND backend_type = 'client backend' "
                "AND datname = current_database()"
            )
        outcomes: list[bool | None] = []
        for _ in range(3):
            try:
                outcomes.append((await store.admit([user("t1", "k2")]))[0].duplicate)
            except StoreError as exc:
                assert "PostgreSQL" in str(exc)
                outcomes.append(None)
        assert outcomes[-1] is True, f"admitted once, then duplicates: {outcomes}"
        assert outcomes.count(False) == 1
    finally:
        await store.close()


@pytest.mark.parametrize("pool_size", [1])
async def test_reads_recover_after_pooled_connections_are_cut(pg_url: str, pool_size: int) -> None:
    store = PostgresStore(pg_url, pool_size=pool_size)
    await store.open()
    try:
        await store.admit([user("t1", "k1")])
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'dormant' AND pid <> pg_backend_pid()"
            )
        for _ in range(3):
            try:
                thread = await store.get_thread("t1")
                break
            except StoreError:
                continue
        else:
            raise AssertionError("reads never recovered")
        assert thread.id == "t1"
    finally:
        await store.close()


async def test_bench_scale_reports_the_bytes_postgres_stores(
    pg: PgServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DORMANT_BENCH_PG_DSN", pg.url)  # the bench makes (and drops) its schema
    result = await run_scale("postgres", agents=4, turns=1, wave=2, out=tmp_path / "scale", concurrency=4)
    assert result.db_bytes > 0 and result.db_bytes_per_agent > 0
    assert all(row.db_bytes > 0 for row in load_waves(tmp_path / "scale" / "waves.csv"))


async def test_a_batch_of_large_jobs_runs_without_pipeline_mode(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Large parameters are written one statement at a time, never pipelined (a pipelined
    batch of a few large parameters stalled with bytes left in the client's buffer)."""
    from dormant.store.postgres import writer

    pipelined: list[int] = []
    fast = writer.Writer._fast

    async def spy(
        self: writer.Writer, conn: psycopg.AsyncConnection[object], jobs: list[writer.Job]
    ) -> object:
        pipelined.append(sum(job.size for job in jobs))
        return await fast(self, conn, jobs)  # type: ignore[arg-type]

    monkeypatch.setattr(writer.Writer, "_fast", spy)
    store = PostgresStore(pg_url, pool_size=1)
    await store.open()
    try:
        big = "x" * 400_000
        items = [
            NewInput(thread_id="t1", kind="user", dedup_key=f"k{n}", content=big, agent="a") for n in range(5)
        ]
        admitted = await store.admit(items)
        assert [a.duplicate for a in admitted] == [False] * 5
        await store.admit([user("t2", "small")])
        assert pipelined and max(pipelined) <= writer.PIPELINE_MAX_BYTES  # the small ones still are
        assert (await store.get_thread("t1")).id == "t1"
    finally:
        await store.close()
