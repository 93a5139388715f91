"""Contract: tenants and API keys — unique names, keys hashed at rest, revocable, paged."""

from __future__ import annotations

import pytest

from dormant.errors import NotFound, Unauthenticated, UsageError
from dormant.records import NewThread
from dormant.store.base import Store
from tests.contract.support import turn, user


async def test_tenant_names_are_unique_and_checked(store: Store) -> None:
    acme = await store.create_tenant("acme")
    assert (await store.tenant("acme")) == acme == (await store.tenant(acme.id))
    with pytest.raises(UsageError):
        await store.create_tenant("acme")
    for bad in ("bad name", "", "-x", "x" * 65):
        with pytest.raises(UsageError):
            await store.create_tenant(bad)
    with pytest.raises(NotFound):
        await store.tenant("nobody")


async def test_tenants_are_paged_by_name(store: Store) -> None:
    for name in ("c", "a", "b"):
        await store.create_tenant(name)
    first = await store.list_tenants(limit=2)
    assert [t.name for t in first.items] == ["a", "b"] and first.next_cursor == "b"
    rest = await store.list_tenants(cursor=first.next_cursor, limit=2)
    assert [t.name for t in rest.items] == ["c"] and rest.next_cursor is None


async def test_keys_authenticate_their_tenant_until_revoked(store: Store) -> None:
    acme = await store.create_tenant("acme")
    bravo = await store.create_tenant("bravo")
    key, token = await store.create_key("acme")  # by name or by id
    _, token2 = await store.create_key(acme.id)
    _, token_b = await store.create_key(bravo.id)
    assert key.tenant_id == acme.id and key.revoked_at is None and token.startswith("dk_" + key.id + "_")
    assert (await store.authenticate(token)) == acme
    assert (await store.authenticate(token_b)) == bravo
    swapped = token_b[: len("dk_") + 16] + token[len("dk_") + 16 :]  # b's key id, a's secret
    for bad in ("", "dk_x", token[:-1] + ("A" if token[-1] != "A" else "B"), swapped):
        with pytest.raises(Unauthenticated):
            await store.authenticate(bad)
    revoked = await store.revoke_key(key.id)
    assert revoked.revoked_at is not None
    with pytest.raises(Unauthenticated):
        await store.authenticate(token)
    assert (await store.authenticate(token2)) == acme
    again = await store.revoke_key(key.id)  # idempotent: the first revocation time stays
    assert again.revoked_at == revoked.revoked_at
    with pytest.raises(NotFound):
        await store.revoke_key("0" * 16)
    with pytest.raises(NotFound):
        await store.create_key("nobody")


async def test_keys_are_paged_per_tenant(store: Store) -> None:
    acme = await store.create_tenant("acme")
    other = await store.create_tenant("other")
    made = sorted([(await store.create_key(acme.id))[0].id for _ in range(3)])
    await store.create_key(other.id)
    first = await store.list_keys(acme.id, limit=2)
    assert [k.id for k in first.items] == made[:2] and first.next_cursor == made[1]
    rest = await store.list_keys(acme.id, cursor=first.next_cursor, limit=2)
    assert [k.id for k in rest.items] == made[2:] and rest.next_cursor is None


async def test_a_tenants_status_counts_only_its_threads_and_their_children(store: Store) -> None:
    acme = await store.create_tenant("acme")
    other = await store.create_tenant("other")
    root = f"{acme.id}/a"
    # a slice of acme's root spawns a child (whose id extends its parent's) and writes messages
    await turn(
        store,
        root,
        "k1",
        reply="spawned",
        threads=[NewThread(id=f"{root}/call1", agent="a", parent_id=root, parent_seq=1)],
    )
    await store.admit([user(f"{root}/call1", "k2"), user(f"{acme.id}/b", "k3")])
    await store.admit([user(f"{other.id}/a", "k4"), user("plain", "k5")])  # another tenant; default
    mine = await store.status(acme.id)
    assert mine.threads_by_status == {"active": 3}
    assert mine.backlog_by_priority == {"P1": 2}
    assert mine.messages == 2  # the root's user message and reply
    theirs = await store.status(other.id)
    assert theirs.threads_by_status == {"active": 1} and theirs.messages == 0
    assert (await store.status("t000000000000")).threads_by_status == {}
    everything = await store.status()
    assert everything.threads_by_status == {"active": 5}
    assert everything.backlog_by_priority == {"P1": 4}
