"""Contract: paged reads (history, threads, outbox), has_work and status."""

from __future__ import annotations

import pytest

from dormant.errors import NotFound, UsageError
from dormant.records import Message, NewThread, OutboxOutcome, Priority
from dormant.store.base import MAX_PAGE, Store
from tests.contract.support import call, claim, plan, take, turn, user
from tests.helpers import FakeClock, all_messages


async def history_of(store: Store, n_assistant: int, thread_id: str = "t1") -> None:
    """A thread with 1 + ``n_assistant`` messages."""
    await turn(store, thread_id, "k1", reply="a0", extra=n_assistant - 1)


async def pages(store: Store, thread_id: str, limit: int, *, newest_first: bool) -> list[list[int]]:
    out: list[list[int]] = []
    cursor: str | None = None
    while True:
        page = await store.history(thread_id, cursor=cursor, limit=limit, newest_first=newest_first)
        out.append([m.seq for m in page.items])
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor


async def test_history_pages_oldest_first(store: Store) -> None:
    await history_of(store, 24)
    assert await pages(store, "t1", 10, newest_first=False) == [
        list(range(1, 11)),
        list(range(11, 21)),
        list(range(21, 26)),
    ]


async def test_history_pages_newest_first(store: Store) -> None:
    await history_of(store, 24)
    assert await pages(store, "t1", 10, newest_first=True) == [
        list(range(25, 15, -1)),
        list(range(15, 5, -1)),
        list(range(5, 0, -1)),
    ]


async def test_history_exact_multiple_of_the_page_size(store: Store) -> None:
    await history_of(store, 9)
    forward = await pages(store, "t1", 5, newest_first=False)
    backward = await pages(store, "t1", 5, newest_first=True)
    assert [s for p in forward for s in p] == list(range(1, 11))
    assert [s for p in backward for s in p] == list(range(10, 0, -1))
    assert all(p for p in forward[:-1]) and all(p for p in backward[:-1])


async def test_history_from_a_cursor(store: Store) -> None:
    await history_of(store, 9)
    page = await store.history("t1", cursor="7", limit=100)
    assert [m.seq for m in page.items] == [8, 9, 10] and page.next_cursor is None
    page = await store.history("t1", cursor="4", limit=100, newest_first=True)
    assert [m.seq for m in page.items] == [3, 2, 1] and page.next_cursor is None
    assert (await store.history("t1", cursor="10")).items == ()
    assert (await store.history("t1", cursor="99")).items == ()
    assert (await store.history("t1", cursor="1", newest_first=True)).items == ()


async def test_history_cursor_zero_newest_first_is_empty(store: Store) -> None:
    await history_of(store, 4)
    page = await store.history("t1", cursor="0", newest_first=True)
    assert page.items == () and page.next_cursor is None


async def test_history_limit_is_clamped(store: Store) -> None:
    await history_of(store, MAX_PAGE + 4)
    page = await store.history("t1", limit=5000)
    assert len(page.items) == MAX_PAGE and page.next_cursor == str(MAX_PAGE)
    page = await store.history("t1", limit=5000, newest_first=True)
    assert len(page.items) == MAX_PAGE and page.items[0].seq == MAX_PAGE + 5
    page = await store.history("t1", limit=0)
    assert [m.seq for m in page.items] == [1]
    page = await store.history("t1", limit=-3)
    assert [m.seq for m in page.items] == [1]


async def test_history_of_an_empty_or_unknown_thread(store: Store) -> None:
    await store.create_thread("t1", "a")
    page = await store.history("t1")
    assert page.items == () and page.next_cursor is None
    with pytest.raises(NotFound):
        await store.history("ghost")


async def test_a_bad_cursor_is_a_usage_error(store: Store) -> None:
    await history_of(store, 2)
    with pytest.raises(UsageError):
        await store.history("t1", cursor="not-a-seq")


async def test_history_holds_only_the_threads_own_messages(store: Store) -> None:
    await store.admit([user("p", "k")])
    c, load = await take(store, "p")
    kid = NewThread(id="p/kid", agent="a", parent_id="p", parent_seq=1)
    await store.commit_slice(plan(c, load, threads=[kid], admissions=[user("p/kid", "task", agent=None)]))
    c, load = await take(store, "p/kid")
    await store.commit_slice(plan(c, load, reply="kid says"))
    assert [m.content for m in await all_messages(store, "p/kid")] == ["text of task", "kid says"]
    assert [m.content for m in await all_messages(store, "p")] == ["text of k", "ok"]


async def test_history_round_trips_tool_calls(store: Store) -> None:
    await turn(store, "t1", "k1", calls=[call("c1", "f", arguments='{"q": "ü"}')])
    history: list[Message] = await all_messages(store, "t1")
    (tc,) = history[1].tool_calls
    assert (tc.id, tc.name, tc.arguments) == ("c1", "f", '{"q": "ü"}')


async def test_list_threads_pages_by_id(store: Store) -> None:
    for name in ["t5", "t1", "t3", "t2", "t4", "t7", "t6"]:
        await store.create_thread(name, "a")
    seen: list[list[str]] = []
    cursor: str | None = None
    while True:
        page = await store.list_threads(cursor=cursor, limit=3)
        seen.append([t.id for t in page.items])
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == [["t1", "t2", "t3"], ["t4", "t5", "t6"], ["t7"]]
    assert len((await store.list_threads(limit=10_000)).items) == 7
    assert (await store.list_threads(cursor="t7")).items == ()


async def test_list_outbox_pages_and_filters_by_status(store: Store) -> None:
    await turn(store, "t1", "k1", calls=[call(f"c{i}") for i in range(5)])
    await store.claim_outbox("w", 2, 60.0)
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page = await store.list_outbox(cursor=cursor, limit=2)
        seen.extend(e.call_id for e in page.items)
        assert len(page.items) <= 2
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == [f"c{i}" for i in range(5)]
    assert [e.call_id for e in (await store.list_outbox(status="running")).items] == ["c0", "c1"]
    assert [e.call_id for e in (await store.list_outbox(status="pending")).items] == ["c2", "c3", "c4"]
    assert (await store.list_outbox(status="dead")).items == ()


async def test_has_work(store: Store, clock: FakeClock) -> None:
    assert not await store.has_work()
    await store.create_thread("idle", "a")
    assert not await store.has_work()
    await store.admit([user("t1", "k1", not_before=clock.now + 10)])
    assert not await store.has_work(), "a timer due later is not work now"
    clock.advance(10)
    assert await store.has_work()
    c, load = await take(store, "t1")
    assert await store.has_work(), "a leased thread is work"
    await store.commit_slice(plan(c, load, calls=[call("c1")]))
    assert await store.has_work(), "an open call is work"
    (entry,) = await store.claim_outbox("w", 10, 60.0)
    assert await store.has_work()
    assert entry.token is not None
    await store.finish_outbox([OutboxOutcome(entry_id=entry.id, token=entry.token, kind="done", content="r")])
    assert await store.has_work(), "its result is ready input"
    c, load = await take(store, "t1")
    await store.commit_slice(plan(c, load))
    assert not await store.has_work()


async def test_status_counts(store: Store, clock: FakeClock) -> None:
    await store.admit([user("t1", "k1", priority=Priority.P0), user("t1", "k2", priority=Priority.P2)])
    await store.admit([user("t2", "k1"), user("t3", "k1", not_before=clock.now + 100)])
    await turn(store, "t4", "k1", calls=[call("c1"), call("c2")])
    c = await claim(store, "t2")
    await store.create_thread("t5", "a")
    c5 = await claim(store, "t1")
    await store.release(c5, error="x", fail=True)
    status = await store.status()
    assert status.threads_by_status == {"active": 4, "failed": 1}
    assert status.threads_leased == 1
    # t2 has due input (leased or not); t1 failed, t3 not due, t4 waits on its calls
    assert status.threads_ready == 1
    assert status.backlog_by_priority == {"P0": 1, "P1": 2, "P2": 1}
    assert status.outbox_by_status == {"pending": 2}
    assert status.dead_letters == 0
    assert status.messages == 2
    await store.release(c)
    assert (await store.status()).threads_leased == 0


async def test_history_pages_are_bounded_by_content_bytes(store: Store) -> None:
    sizes = [10, 30, 5, 100, 1, 1]
    await store.admit([user("t1", f"k{i}", "x" * n) for i, n in enumerate(sizes)])
    c, load = await take(store, "t1")
    await store.commit_slice(plan(c, load, reply=None))
    assert [len(m.content) for m in await all_messages(store, "t1")] == sizes

    async def walk(max_bytes: int, *, newest_first: bool = False) -> list[list[int]]:
        out: list[list[int]] = []
        cursor: str | None = None
        while True:
            page = await store.history(
                "t1", cursor=cursor, limit=4, newest_first=newest_first, max_bytes=max_bytes
            )
            out.append([len(m.content) for m in page.items])
            if page.next_cursor is None:
                return out
            cursor = page.next_cursor

    assert await walk(40) == [[10, 30], [5], [100], [1, 1]]  # a message over the bound comes alone
    assert await walk(1000) == [[10, 30, 5, 100], [1, 1]]  # the count bound still holds
    assert await walk(6, newest_first=True) == [[1, 1], [100], [5], [30], [10]]
    with pytest.raises(UsageError):
        await store.history("t1", max_bytes=0)
