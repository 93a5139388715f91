"""Contract: content parts round-trip on inputs and messages, and the same bytes are one blob."""

from __future__ import annotations

from dormant.parts import File, Image, Limits, Text, store_parts
from dormant.store.base import Store
from tests.helpers import all_messages
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
