"""Contract: images and files on tool results (through the outbox, durably), read back by
reference only from the threads that refer to them, and collected with their last thread."""

from __future__ import annotations

import pytest

from dormant.errors import NotFound, UsageError
from dormant.parts import File, Image, Limits, store_parts
from dormant.records import NewThread, OutboxEntry, OutboxOutcome, Part
from dormant.store.base import Store
from dormant.tools.results import PartsOutput, stored_result
from tests.helpers import FakeClock, all_messages
from tests.media_samples import pdf, png

from .support import LEASE, call, plan, take, turn, user
from .test_blobs import layout


def done(entry: OutboxEntry, content: str, parts: tuple[Part, ...] = ()) -> OutboxOutcome:
    assert entry.token is not None
    return OutboxOutcome(entry_id=entry.id, token=entry.token, kind="done", content=content, parts=parts)


async def test_a_done_result_carries_its_parts_to_the_input_and_the_tool_message(store: Store) -> None:
    await turn(store, "t1", "k1", calls=[call("c1", "chart"), call("c2", "plain")])
    first, second = await store.claim_outbox("w", 10, 60.0)
    kept = await stored_result(
        store,
        "t1",
        PartsOutput(("the chart", Image(png(40, 30), name="c.png"), File(pdf("No 9")))),
        1 << 14,
        Limits(),
    )
    assert not kept.is_error and kept.content == "the chart"
    # a batch mixing a result with parts and one without: each admitted with what it carries
    assert await store.finish_outbox([done(first, kept.content, kept.parts), done(second, "text")]) == [
        True,
        True,
    ]
    c, load = await take(store, "t1")
    assert [(i.call_id, i.content, i.parts) for i in load.inputs] == [
        ("c1", "the chart", kept.parts),
        ("c2", "text", ()),
    ]
    await store.commit_slice(plan(c, load))
    tools = [m for m in await all_messages(store, "t1") if m.role == "tool"]
    assert [m.parts for m in tools] == [kept.parts, ()]
    image, invoice = tools[0].parts
    assert (image.kind, image.media_type, image.width, image.height, image.name) == (
        "image",
        "image/png",
        40,
        30,
        "c.png",
    )
    assert (invoice.kind, invoice.media_type, invoice.text) == ("file", "application/pdf", "No 9")
    assert await store.read_blob("t1", image.ref, 0, 1 << 20) == png(40, 30)
    assert await store.part_bytes_today("t1") == image.size + invoice.size  # the thread-day limit counts them


async def test_a_result_with_parts_whose_lease_was_lost_admits_nothing(
    store: Store, clock: FakeClock
) -> None:
    await turn(store, "t1", "k1", calls=[call("c1", idempotent=True)])
    (entry,) = await store.claim_outbox("w1", 10, LEASE)
    _, parts = await store_parts(store, "t1", [Image(png())], Limits())
    clock.advance(LEASE + 1)
    (again,) = await store.claim_outbox("w2", 10, LEASE)  # reconciled: pending, then leased again
    assert await store.finish_outbox([done(entry, "late", parts)]) == [False]
    assert await store.finish_outbox([done(again, "on time", parts)]) == [True]
    _, load = await take(store, "t1")
    assert [(i.content, i.parts) for i in load.inputs] == [("on time", parts)]


async def test_the_first_answer_wins_over_a_later_result_with_parts(store: Store) -> None:
    await turn(store, "t1", "k1", calls=[call("c1")])
    (entry,) = await store.claim_outbox("w", 10, 60.0)
    await store.complete_call("t1", "c1", "answered from outside")
    _, parts = await store_parts(store, "t1", [Image(png())], Limits())
    assert await store.finish_outbox([done(entry, "too late", parts)]) == [False]  # the entry is answered
    _, load = await take(store, "t1")
    assert [(i.content, i.parts) for i in load.inputs] == [("answered from outside", ())]
    assert (await store.list_outbox()).items == ()


async def test_only_a_done_outcome_carries_parts(store: Store) -> None:
    await turn(store, "t1", "k1", calls=[call("c1")])
    (entry,) = await store.claim_outbox("w", 10, 60.0)
    _, parts = await store_parts(store, "t1", [Image(png())], Limits())
    assert entry.token is not None
    dead = OutboxOutcome(entry_id=entry.id, token=entry.token, kind="dead", content="x", parts=parts)
    with pytest.raises(UsageError, match="carries no parts"):
        await store.finish_outbox([dead])
    assert [e.status for e in (await store.list_outbox()).items] == ["running"]


async def test_a_part_is_read_by_its_threads_and_their_children_only(store: Store) -> None:
    photo = png(33, 22)
    _, (part,) = await store_parts(store, "owner", [Image(photo)], Limits(), "a")
    await store.admit([user("owner", "k1", "look", parts=(part,))])
    c, load = await take(store, "owner")
    await store.commit_slice(
        plan(c, load, threads=[NewThread(id="owner/kid", agent="a", parent_id="owner", parent_seq=1)])
    )
    await turn(store, "stranger", "k1")
    for reader in ("owner", "owner/kid"):
        assert (await store.get_blob(reader, part.ref)).size == len(photo)
        assert await store.read_blob(reader, part.ref, 0, 1 << 20) == photo
    for reader in ("stranger", "nobody"):
        with pytest.raises(NotFound):
            await store.read_blob(reader, part.ref, 0, 16)
        with pytest.raises(NotFound):
            await store.get_blob(reader, part.ref)


async def test_a_shared_photo_stays_until_the_last_thread_referring_to_it_is_deleted(store: Store) -> None:
    photo = png(50, 50)
    for thread in ("one", "two"):
        _, parts = await store_parts(store, thread, [Image(photo)], Limits(), "a")
        await store.admit([user(thread, "k1", "a photo", parts=parts)])
        c, load = await take(store, thread)
        await store.commit_slice(plan(c, load))
    ref = parts[0].ref
    assert await layout(store) == (1, 1, 2)  # one blob, referred to by both threads
    assert await store.delete_thread("one") == 1
    assert await layout(store) == (1, 1, 1)
    assert await store.read_blob("two", ref, 0, 1 << 20) == photo
    assert await store.delete_thread("two") == 1
    assert await layout(store) == (0, 0, 0)
    with pytest.raises(NotFound):
        await store.get_blob("two", ref)


async def test_a_tools_texts_are_cleaned_before_they_are_stored(store: Store) -> None:
    await turn(store, "t1", "k1", calls=[call("c1")])
    (entry,) = await store.claim_outbox("w", 10, 60.0)
    output = PartsOutput(("te\x00xt", Image(png(), alt="al\x00t \ud800", name="n\x00.png")))
    kept = await stored_result(store, "t1", output, 1 << 14, Limits())
    assert await store.finish_outbox([done(entry, kept.content, kept.parts)]) == [True]
    _, load = await take(store, "t1")
    ((content, (part,)),) = [(i.content, i.parts) for i in load.inputs]
    assert (content, part.text, part.name) == ("text", "alt \ufffd", "n.png")
