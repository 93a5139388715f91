"""Contract: a dedup key keeps its request's fingerprint; another body with it is refused."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from dormant.errors import IdempotencyMismatch, InvalidInput
from dormant.records import MAX_FINGERPRINT, NewInput
from dormant.store.base import Store
from tests.contract.conftest import Backend
from tests.contract.support import pending_inputs, user
from tests.helpers import FakeClock


def signed(item: NewInput, fingerprint: str | None) -> NewInput:
    return msgspec.structs.replace(item, fingerprint=fingerprint)


async def test_the_same_key_and_fingerprint_is_a_duplicate(store: Store) -> None:
    (first,) = await store.admit([signed(user("t1", "k1", "hello"), "f:aa")])
    (again,) = await store.admit([signed(user("t1", "k1", "hello"), "f:aa")])
    assert again.duplicate and again.input_id == first.input_id
    assert await pending_inputs(store, "t1") == ["k1"]


async def test_another_fingerprint_is_refused_and_writes_nothing_of_the_batch(store: Store) -> None:
    await store.admit([signed(user("t1", "k1", "hello"), "f:aa")])
    batch = [signed(user("t1", "k0", "new"), "f:bb"), signed(user("t1", "k1", "changed"), "f:bb")]
    with pytest.raises(IdempotencyMismatch) as caught:
        await store.admit(batch)
    assert caught.value.code == "idempotency_mismatch"
    assert await pending_inputs(store, "t1") == ["k1"]  # k0 of the refused batch is not there
    # a key stored without a fingerprint (an older admission) takes any body, as before
    await store.admit([user("t1", "k2", "plain")])
    (dup,) = await store.admit([signed(user("t1", "k2", "other"), "f:cc")])
    assert dup.duplicate


async def test_the_fingerprint_is_durable(
    backend: Backend, store: Store, tmp_path: Path, clock: FakeClock
) -> None:
    if not backend.durable:
        pytest.skip(f"the {backend.name} store is not durable by design")
    await store.admit([signed(user("t1", "k1", "hello"), "f:aa")])
    await store.close()
    reopened = backend.make(tmp_path, clock)
    await reopened.open()
    try:
        with pytest.raises(IdempotencyMismatch):
            await reopened.admit([signed(user("t1", "k1", "hello"), "f:zz")])
        (dup,) = await reopened.admit([signed(user("t1", "k1", "hello"), "f:aa")])
        assert dup.duplicate
    finally:
        await reopened.close()
        await store.open()  # the fixture closes it again


async def test_a_fingerprint_is_bounded(store: Store) -> None:
    with pytest.raises(InvalidInput, match="fingerprint"):
        await store.admit([signed(user("t1", "k1"), "f" * (MAX_FINGERPRINT + 1))])
    assert not (await store.list_threads(limit=10)).items  # nothing admitted, no thread made
