"""Contract: a second tenant can neither see nor act on the first tenant's threads, cursors,
blobs or calls — every attempt is NotFound, the same as for something that never existed."""

from __future__ import annotations

import pytest

from dormant.errors import NotFound
from dormant.store.base import Store
from dormant.store.tenancy import Scope
from tests.contract.support import call, turn, user


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
    with pytest.raises(NotFound):
        b.inner("../" + secret)  # nor can b name it with a path

    page = await store.list_threads(cursor=b.list_cursor(None), limit=50)
    mine, _ = b.page(page)
    assert [b.outer(t.id) for t in mine] == ["mine"]
    assert (await store.status(b.tenant_id)).messages == 0
    # and a's thread is untouched by all of it
    assert (await store.get_thread(secret)).awaiting == 1
    assert (await store.read_blob(secret, ref)) == b"private bytes"
