"""Contract: a second tenant can neither see nor act on the first tenant's threads, cursors,
blobs or calls — every attempt is NotFound, the same as for something that never existed."""

from __future__ import annotations

import pytest

from dormant.errors import InvalidInput, NotFound, StoreError, UsageError
from dormant.store.base import Store
from dormant.tenants.scope import Scope
from tests.contract.support import call, plan, take, turn, user


async def test_a_second_tenant_reaches_nothing_of_the_first(store: Store) -> None:
    a = Scope((await store.create_tenant("acme")).id)
    b = Scope((await store.create_tenant("bravo")).id)
    secret = a.inner("secret")
    await turn(store, secret, "k1", reply="x", extra=2, calls=[call("call_1")])
    ref = (await store.put_blob(secret, [b"private bytes"])).ref
    cursor = (await store.history(secret, limit=1)).next_cursor
    assert cursor is not None
    await store.admit([user(b.inner("mine"), "k1")])  # b's own thread, to name a's blob from

    theirs = b.inner("secret")  # b names a's thread by the id a uses: a thread b does not have
    attempts = [
        store.get_thread(theirs),
        store.history(theirs),
        store.history(theirs, cursor=cursor),
        store.history(theirs, cursor=cursor, newest_first=True),
        store.retry_thread(theirs),
        store.delete_thread(theirs),
        store.complete_call(theirs, "call_1", "forged"),
        store.complete_call(b.inner("mine"), "call_1", "forged"),  # a's call, from b's thread
        store.get_blob(b.inner("mine"), ref),  # a's blob, from b's thread
        store.read_blob(b.inner("mine"), ref),
        store.get_blob(theirs, ref),
    ]
    for attempt in attempts:
        with pytest.raises(NotFound):
            await attempt
    with pytest.raises(NotFound):
        b.outer(secret)  # a's stored id is never shown to b as one of its own
    with pytest.raises(InvalidInput):
        b.inner("../" + secret)  # nor can b name it with a path: malformed, whoever asks

    page = await store.list_threads(cursor=b.list_cursor(None), limit=50, tenant=b.tenant_id)
    assert [b.outer(t.id) for t in b.page(page.items)] == ["mine"]
    assert (await store.status(b.tenant_id)).messages == 0
    # and a's thread is untouched by all of it
    assert (await store.get_thread(secret)).awaiting == 1
    assert (await store.read_blob(secret, ref)) == b"private bytes"


async def test_the_core_refuses_another_tenants_stored_ids_whatever_the_caller_sends(store: Store) -> None:
    """The store core enforces scope itself: a caller that passes its tenant but another
    tenant's stored ids (a bug above the store, say) reaches nothing, and changes nothing."""
    a = Scope((await store.create_tenant("acme")).id)
    b = Scope((await store.create_tenant("bravo")).id)
    secret = a.inner("secret")
    await turn(store, secret, "k1", reply="x", calls=[call("call_1")])
    ref = (await store.put_blob(secret, [b"private bytes"])).ref
    library = "plain"  # a thread of the library's default tenant
    await store.admit([user(library, "k1")])
    before = (await store.get_thread(secret), (await store.history(secret)).items)

    tenant = b.tenant_id
    for theirs in (secret, library):
        attempts = [
            store.get_thread(theirs, tenant=tenant),
            store.create_thread(theirs, "a", tenant=tenant),
            store.history(theirs, tenant=tenant),
            store.history(theirs, cursor="1", newest_first=True, tenant=tenant),
            store.retry_thread(theirs, tenant=tenant),
            store.delete_thread(theirs, tenant=tenant),
            store.admit([user(theirs, "forged")], tenant=tenant),
            store.admit([user(b.inner("mine"), "k"), user(theirs, "forged")], tenant=tenant),
            store.complete_call(theirs, "call_1", "forged", tenant=tenant),
            store.put_blob(theirs, [b"forged"], tenant=tenant),
            store.get_blob(theirs, ref, tenant=tenant),
            store.read_blob(theirs, ref, tenant=tenant),
            store.list_threads(cursor=theirs, tenant=tenant),
        ]
        for attempt in attempts:
            with pytest.raises(NotFound):
                await attempt
    with pytest.raises(UsageError):
        await store.list_threads(tenant="")  # the default tenant is listed unscoped
    # nothing of the batch that named a foreign thread was admitted, not even b's own input
    with pytest.raises(NotFound):
        await store.get_thread(b.inner("mine"))
    assert (await store.get_thread(secret), (await store.history(secret)).items) == before
    assert (await store.read_blob(secret, ref, tenant=a.tenant_id)) == b"private bytes"
    # and the owner, passing its own tenant, reaches all of it
    assert (await store.get_thread(secret, tenant=a.tenant_id)).id == secret
    listed = await store.list_threads(tenant=a.tenant_id)
    assert [t.id for t in listed.items] == [secret]


async def test_a_listing_of_one_tenant_pages_through_its_threads_only(store: Store) -> None:
    a = Scope((await store.create_tenant("acme")).id)
    b = Scope((await store.create_tenant("bravo")).id)
    await store.admit([user(a.inner(f"x{n}"), "k") for n in range(5)])
    await store.admit([user(b.inner(f"x{n}"), "k") for n in range(3)] + [user("zz", "k")])
    seen: list[str] = []
    cursor = None
    while True:
        page = await store.list_threads(cursor=cursor, limit=2, tenant=a.tenant_id)
        seen += [a.outer(t.id) for t in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == [f"x{n}" for n in range(5)]
    last = await store.list_threads(cursor=a.inner("x4"), limit=2, tenant=a.tenant_id)
    assert last.items == () and last.next_cursor is None  # b's threads follow: not shown


async def test_a_slice_may_not_write_into_another_tenant(store: Store) -> None:
    a = Scope((await store.create_tenant("acme")).id)
    b = Scope((await store.create_tenant("bravo")).id)
    await store.admit([user(a.inner("t"), "k")])
    c, load = await take(store, a.inner("t"))
    forged = plan(c, load, admissions=[user(b.inner("victim"), "forged")])
    with pytest.raises(StoreError):
        await store.commit_slice(forged)
    with pytest.raises(NotFound):
        await store.get_thread(b.inner("victim"))
    await store.commit_slice(plan(c, load))  # the lease still holds: nothing was applied
