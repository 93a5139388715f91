"""Contract: content parts round-trip on inputs and messages, and the same bytes are one blob."""

from __future__ import annotations

import pytest

from dormant.errors import PayloadTooLarge
from dormant.parts import File, Image, Limits, Text, store_parts
from dormant.store.base import Store
from tests.helpers import FakeClock, all_messages
from tests.media_samples import pdf, png

from .support import plan, take, user
from .test_blobs import layout


async def test_parts_round_trip_and_the_same_bytes_are_one_blob(store: Store) -> None:
    limits = Limits()
    photo = png(30, 20)
    text, parts = await store_parts(
        store, "t1", [Text("look"), Image(photo, name="p.png"), File(pdf("No 7"), name="i.pdf")], limits, "a"
    )
    _, again = await store_parts(store, "t2", [Image(photo, alt="the same picture")], limits, "a")
    assert again[0].ref == parts[0].ref
    assert await layout(store) == (2, 2, 3)  # two blobs of one chunk each; t1 refers to both
    await store.admit([user("t1", "k1", text, parts=parts), user("t2", "k2", "", parts=again)])
    await store.admit([user("t3", "k3", "no parts")])
    for thread, expected in (("t1", parts), ("t2", again), ("t3", ())):
        c, load = await take(store, thread)
        assert load.inputs[0].parts == expected
        await store.commit_slice(plan(c, load))
        first = (await all_messages(store, thread))[0]
        assert first.parts == expected
    (image, invoice) = parts
    assert (image.media_type, image.width, image.height, image.name) == ("image/png", 30, 20, "p.png")
    assert (invoice.kind, invoice.media_type, invoice.text) == ("file", "application/pdf", "No 7")
    assert again[0].text == "the same picture"
    assert await store.read_blob("t2", again[0].ref, 0, 1 << 20) == photo


async def test_the_thread_day_limit_counts_pending_and_consumed_parts_of_the_utc_day(
    store: Store, clock: FakeClock
) -> None:
    one, two = png(30, 20), png(31, 20)
    limits = Limits(thread_day_bytes=len(one) + len(two) + 10)
    _, first = await store_parts(store, "d1", [Image(one)], limits, "a")
    await store.admit([user("d1", "k1", "a", parts=first)])
    assert await store.part_bytes_today("d1") == len(one)  # pending
    _, second = await store_parts(store, "d1", [Image(two)], limits, "a")
    await store.admit([user("d1", "k2", "b", parts=second)])
    c, load = await take(store, "d1")
    await store.commit_slice(plan(c, load))  # consumed: now the messages' parts count
    assert await store.part_bytes_today("d1") == len(one) + len(two)
    blobs = await layout(store)
    with pytest.raises(PayloadTooLarge, match="daily limit"):
        await store_parts(store, "d1", [Image(png(32, 20))], limits, "a")
    assert await layout(store) == blobs  # refused before any blob was stored
    _, other = await store_parts(store, "d2", [Image(png(32, 20))], limits, "a")  # another thread
    assert other
    clock.advance(86400)  # the next UTC day counts afresh
    assert await store.part_bytes_today("d1") == 0
    _, later = await store_parts(store, "d1", [Image(png(32, 20))], limits, "a")
    assert later
