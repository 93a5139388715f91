"""Contract: what a model server said about a reply. Usage, finish reason and
reasoning stored on the assistant message; usage summed on the thread and in the status;
views never hold reasoning; a thread's wait on its model endpoint kept until its next
commit, release or retry."""

from __future__ import annotations

import msgspec

from dormant.records import CommitPlan, Usage, ViewLimits
from dormant.store.base import Store
from dormant.store.core import MAX_WAIT_REASON, StoreCore
from tests.contract.support import claim, plan, take, user
from tests.helpers import FakeClock, all_messages


def replied(p: CommitPlan, *, usage: Usage | None, finish: str | None, reasoning: str | None) -> CommitPlan:
    """``p`` with its assistant message carrying what the server said, and the slice's usage."""
    messages = tuple(
        msgspec.structs.replace(m, usage=usage, finish_reason=finish, reasoning=reasoning)
        if m.role == "assistant"
        else m
        for m in p.messages
    )
    return msgspec.structs.replace(p, messages=messages, usage=usage)


async def slice_with(
    store: Store, thread_id: str, key: str, *, usage: Usage | None, finish: str | None, reasoning: str | None
) -> CommitPlan:
    """Admit ``key`` to ``thread_id`` and commit a slice whose reply carries what the server said."""
    await store.admit([user(thread_id, key)])
    c, load = await take(store, thread_id)
    committed = replied(
        plan(c, load, reply=f"answer to {key}"), usage=usage, finish=finish, reasoning=reasoning
    )
    await store.commit_slice(committed)
    return committed


async def test_usage_finish_reason_and_reasoning_are_stored_on_the_message(store: Store) -> None:
    await slice_with(
        store, "t1", "k1", usage=Usage(prompt=100, completion=20, cached=64), finish="length", reasoning="hm"
    )
    await slice_with(store, "t1", "k2", usage=None, finish=None, reasoning=None)
    history = await all_messages(store, "t1")
    assert [(m.role, m.finish_reason, m.reasoning, m.usage, m.cut) for m in history] == [
        ("user", None, None, None, False),
        ("assistant", "length", "hm", Usage(prompt=100, completion=20, cached=64), True),
        ("user", None, None, None, False),
        ("assistant", None, None, None, False),
    ]


async def test_usage_is_summed_per_thread_and_in_the_status(store: Store) -> None:
    await slice_with(
        store, "t1", "k1", usage=Usage(prompt=100, completion=20, cached=64), finish="stop", reasoning=None
    )
    await slice_with(
        store, "t1", "k2", usage=Usage(prompt=150, completion=30, cached=100), finish="stop", reasoning=None
    )
    await slice_with(store, "t2", "k1", usage=Usage(prompt=7, completion=1), finish="stop", reasoning=None)
    await slice_with(store, "t2", "k2", usage=None, finish=None, reasoning=None)
    assert (await store.get_thread("t1")).usage == Usage(prompt=250, completion=50, cached=164)
    assert (await store.get_thread("t2")).usage == Usage(prompt=7, completion=1, cached=0)
    assert (await store.status()).usage == {"prompt": 257, "completion": 51, "cached": 164}
    listed = {t.id: t.usage.total for t in (await store.list_threads()).items}
    assert listed == {"t1": 300, "t2": 8}


async def test_a_view_never_holds_reasoning_but_the_history_keeps_it(store: Store) -> None:
    await slice_with(store, "t1", "k1", usage=None, finish="stop", reasoning="secret thoughts " * 100)
    await store.admit([user("t1", "k2")])
    assert isinstance(store, StoreCore)
    store.views.discard("t1")
    for _ in range(2):  # built from the store, then from the view cache
        c, load = await take(store, "t1", ViewLimits())
        assert [m.content for m in load.view] == ["text of k1", "answer to k1"]
        assert all(m.reasoning is None for m in load.view)
        await store.release(c)
    history = await all_messages(store, "t1")
    assert history[1].reasoning == "secret thoughts " * 100


async def test_a_committed_reasoning_never_reaches_a_cached_view(store: Store) -> None:
    await slice_with(store, "t1", "k1", usage=None, finish="stop", reasoning=None)
    await slice_with(store, "t1", "k2", usage=None, finish="stop", reasoning="kept apart")
    await store.admit([user("t1", "k3")])
    _, load = await take(store, "t1")
    assert [m.content for m in load.view][-1] == "answer to k2"
    assert all(m.reasoning is None for m in load.view)


async def test_a_wait_is_kept_until_the_next_commit(store: Store, clock: FakeClock) -> None:
    await store.admit([user("t1", "k1")])
    c = await claim(store, "t1")
    await store.release(c, retry_at=clock.now + 30, wait="ModelError: circuit open, retry in 30.0s")
    thread = await store.get_thread("t1")
    assert (thread.wait_reason, thread.wait_until) == (
        "ModelError: circuit open, retry in 30.0s",
        clock.now + 30,
    )
    assert (thread.status, thread.failures) == ("active", 0), "a wait is not a failure"
    status = await store.status()
    assert (status.threads_waiting, status.waiting_until) == (1, clock.now + 30)
    assert status.waiting_by_reason == {"ModelError: circuit open, retry in 30.0s": 1}

    clock.advance(30)
    c, load = await take(store, "t1")
    await store.commit_slice(plan(c, load))
    thread = await store.get_thread("t1")
    assert (thread.wait_reason, thread.wait_until) == (None, 0.0)
    status = await store.status()
    assert (status.threads_waiting, status.waiting_until, status.waiting_by_reason) == (0, 0.0, {})


async def test_a_release_without_a_wait_or_a_retry_clears_it(store: Store, clock: FakeClock) -> None:
    await store.admit([user("t1", "k1")])
    c = await claim(store, "t1")
    await store.release(c, retry_at=clock.now + 5, wait="down " * 1000)
    assert len((await store.get_thread("t1")).wait_reason or "") == MAX_WAIT_REASON
    clock.advance(5)
    c = await claim(store, "t1")
    await store.release(c, retry_at=clock.now + 1, error="ModelError: refused", fail=True)
    thread = await store.get_thread("t1")
    assert (thread.status, thread.wait_reason) == ("failed", None)

    await store.retry_thread("t1")
    c2 = await claim(store, "t1")
    await store.release(c2, retry_at=clock.now + 5, wait="down")
    assert (await store.get_thread("t1")).wait_reason == "down"
    await store.retry_thread("t1")
    thread = await store.get_thread("t1")
    assert (thread.wait_reason, thread.wait_until) == (None, 0.0)


async def test_waits_are_counted_by_reason(store: Store, clock: FakeClock) -> None:
    for n in range(3):
        await store.admit([user(f"t{n}", "k")])
        c = await claim(store, f"t{n}")
        await store.release(c, retry_at=clock.now + 10 + n, wait="outage A" if n < 2 else "outage B")
    status = await store.status()
    assert status.threads_waiting == 3 and status.waiting_until == clock.now + 12
    assert status.waiting_by_reason == {"outage A": 2, "outage B": 1}


async def test_a_byte_bounded_history_page_counts_reasoning(store: Store) -> None:
    await slice_with(store, "t1", "k1", usage=None, finish="stop", reasoning="r" * 1000)
    await slice_with(store, "t1", "k2", usage=None, finish="stop", reasoning=None)
    page = await store.history("t1", limit=10, max_bytes=500)
    assert [m.seq for m in page.items] == [1] and page.next_cursor == "1"
    page = await store.history("t1", cursor="1", limit=10, max_bytes=500)
    assert [m.seq for m in page.items] == [2], "always one message, even over the bound"
    page = await store.history("t1", cursor="2", limit=10, max_bytes=500)
    assert [m.seq for m in page.items] == [3, 4] and page.next_cursor is None


async def test_a_running_thread_does_not_show_the_attempt_of_its_claim(
    store: Store, clock: FakeClock
) -> None:
    await store.admit([user("t1", "k1")])
    c = await claim(store, "t1")
    running = await store.get_thread("t1")
    assert (running.leased, running.failures, running.failed_attempts) == (True, 1, 0)
    listed = (await store.list_threads(limit=10)).items[0]
    assert (listed.leased, listed.failed_attempts) == (True, 0)
    await store.release(c, retry_at=clock.now + 1, error="ModelError: boom")
    failed_once = await store.get_thread("t1")
    assert (failed_once.leased, failed_once.failures, failed_once.failed_attempts) == (False, 1, 1)
    clock.advance(1)
    await claim(store, "t1")
    again = await store.get_thread("t1")
    assert (again.failures, again.failed_attempts) == (2, 1), "the failure before shows, not the attempt now"


async def test_the_thread_waiting_on_an_endpoint_is_woken_when_it_is_back(
    store: Store, clock: FakeClock
) -> None:
    await store.admit([user("t1", "k1"), user("t2", "k2"), user("t3", "k3")])
    for thread_id, reason in (
        ("t1", "ModelError: cannot reach http://a.test/v1: refused"),
        ("t2", "ModelError: model endpoint http://a.test/v1 is failing; circuit open, retry in 60.0s"),
        ("t3", "ModelError: cannot reach http://b.test/v1: refused"),
    ):
        c = await claim(store, thread_id)
        await store.release(c, retry_at=clock.now + 60, wait=reason)
    assert await store.claim_threads("w", 10, 30.0) == [], "all three wait"
    assert await store.wake_waiting("http://a.test/v1") == 2
    woken = sorted(c.thread_id for c in await store.claim_threads("w", 10, 30.0))
    assert woken == ["t1", "t2"], "only the threads of the endpoint that is back"
    assert await store.wake_waiting("") == 0
