"""Contract: retention keeps old images and files as their facts and text, collects a blob
once nothing refers to it, and keeps one another thread (or a pending input) still uses."""

from __future__ import annotations

import dataclasses

import pytest

from dormant.errors import NotFound
from dormant.parts import Image, Limits, store_parts
from dormant.records import Message, Part, Summary
from dormant.retention.policy import LONG_RUN, gc_round
from dormant.store.base import Store
from tests.helpers import all_messages
from tests.media_samples import png

from .support import plan, take, turn, user
from .test_blobs import layout

LIMITS = Limits()


async def with_parts(store: Store, thread: str) -> list[Message]:
    return [m for m in await all_messages(store, thread) if m.parts]


async def send(store: Store, thread: str, key: str, picture: bytes, alt: str) -> Part:
    """One user message with ``picture``, committed."""
    _, parts = await store_parts(store, thread, [Image(picture, alt=alt, name=f"{key}.png")], LIMITS, "a")
    await store.admit([user(thread, key, f"look at {key}", parts=parts)])
    c, load = await take(store, thread)
    await store.commit_slice(plan(c, load))
    return parts[0]


async def test_old_images_keep_their_facts_and_text_and_their_blobs_go(store: Store) -> None:
    old = await send(store, "t1", "k1", png(30, 20), "a broken parcel")
    older = await send(store, "t1", "k2", png(31, 20), "the label")
    new = await send(store, "t1", "k3", png(32, 20), "the receipt")
    assert await layout(store) == (3, 3, 3)
    assert await store.demote_parts("t1", keep=1, limit=10) == 2
    first, second, third = await with_parts(store, "t1")
    for shown, part in ((first, old), (second, older)):
        assert shown.content == f"look at {(part.name or '')[:2]}"  # the text stays
        (kept,) = shown.parts
        assert not kept.ref and not kept.whole
        assert (kept.kind, kept.media_type, kept.size, kept.width, kept.height, kept.name, kept.text) == (
            part.kind,
            part.media_type,
            part.size,
            part.width,
            part.height,
            part.name,
            part.text,
        )
    assert third.parts == (new,)  # the newest stays whole
    assert await layout(store) == (1, 1, 1)  # the two old blobs are collected
    with pytest.raises(NotFound):
        await store.read_blob("t1", old.ref, 0, 10)
    assert await store.read_blob("t1", new.ref, 0, 4) == b"\x89PNG"
    assert await store.demote_parts("t1", keep=1, limit=10) == 0  # nothing left to do


async def test_a_blob_another_thread_or_a_pending_input_refers_to_is_kept(store: Store) -> None:
    shared, pending = png(40, 20), png(41, 20)
    mine = await send(store, "t1", "k1", shared, "shared")
    theirs = await send(store, "t2", "k1", shared, "the same picture")
    assert mine.ref == theirs.ref
    again = await send(store, "t1", "k2", pending, "sent twice")
    await send(store, "t1", "k3", png(42, 20), "newest")
    # the same picture again, not consumed yet: the thread still refers to its blob
    _, parts = await store_parts(store, "t1", [Image(pending)], LIMITS, "a")
    await store.admit([user("t1", "k4", "again", parts=parts)])
    assert await store.demote_parts("t1", keep=1, limit=10) == 2
    assert not any(p.ref for m in (await with_parts(store, "t1"))[:-1] for p in m.parts)
    assert await store.read_blob("t2", theirs.ref, 0, 4) == b"\x89PNG"  # t2's message keeps it
    with pytest.raises(NotFound):
        await store.read_blob("t1", mine.ref, 0, 4)  # t1 no longer refers to it
    assert await store.read_blob("t1", again.ref, 0, 4) == b"\x89PNG"  # the pending input's
    assert (await with_parts(store, "t2"))[0].parts == (theirs,)


async def test_the_long_run_policy_demotes_parts_and_keep_does_not(store: Store) -> None:
    for n in range(4):
        await send(store, "t1", f"k{n}", png(50 + n, 20), f"photo {n}")
    keep = await gc_round(store, dataclasses.replace(LONG_RUN, name="keep", parts=False), None, 0.0)
    assert keep.demoted == 0
    done = await gc_round(store, dataclasses.replace(LONG_RUN, full_parts=2), None, 0.0)
    assert done.demoted == 2
    whole = [bool(p.ref) for m in await with_parts(store, "t1") for p in m.parts]
    assert whole == [False, False, True, True]
    assert (await layout(store))[0] == 2


async def test_a_pruned_message_releases_the_blobs_of_its_parts(store: Store) -> None:
    await send(store, "t1", "k1", png(60, 20), "one")  # seqs 1, 2
    await send(store, "t1", "k2", png(61, 20), "two")  # seqs 3, 4
    summary = Summary(
        thread_id="t1", upto_seq=4, content="two photos", tokens=3, covered_tokens=0, made_at_seq=4
    )
    await turn(store, "t1", "s", summary=summary)  # seqs 5, 6
    assert await layout(store) == (2, 2, 2)
    assert await store.prune_history("t1", keep_runs=1, keep_tool_calls=1, limit=100) == 4
    assert await layout(store) == (0, 0, 0)
