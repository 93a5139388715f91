"""The async ``Memory`` API (what ``rt.memory`` will be) on a SQLite file."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from dormant.errors import NotFound
from dormant.memory import HashingEmbedder, Memory


async def test_memory_api_end_to_end(tmp_path: Path) -> None:
    async with await Memory.open(f"sqlite:///{tmp_path}/m.db", embedder=HashingEmbedder(64)) as mem:
        alice = await mem.bind({"phone": "+1 555 0100", "device": "a"})
        bob = await mem.bind({"phone": "+15550100", "device": "b"})
        assert (await mem.keys_for("phone", "+15550100")).items == tuple(sorted([alice, bob]))
        assert await mem.load_dictionary([["shipped", "dispatched"]]) == 1
        first = await mem.add(alice, "Order ORD-1 was dispatched", kind="event", tags={"order": "ORD-1"})
        await mem.add(bob, "Bob's order ORD-2 was dispatched", kind="event")
        # many recalls at once, all off the event loop
        results = await asyncio.gather(*(mem.recall([alice], "was it shipped") for _ in range(8)))
        assert all([h.record.id for h in r.hits] == [first.record.id] for r in results)
        assert (await mem.get([alice], first.record.id)).text == "Order ORD-1 was dispatched"
        with pytest.raises(NotFound):
            await mem.get([bob], first.record.id)
        page = await mem.list([alice], limit=1)
        assert [r.id for r in page.items] == [first.record.id] and page.next_cursor is None
        await mem.forget([alice], first.record.id, reason="test")
        assert (await mem.recall([alice], "shipped")).hits == ()
        assert [c.op for c in (await mem.history([alice])).items] == ["add", "forget"]
        assert await mem.rebind(bob, alice, mode="merge") == 1
        assert [h.record.text for h in (await mem.recall([alice], "dispatched")).hits] == [
            "Bob's order ORD-2 was dispatched"
        ]
    # access counts were written at close
    async with await Memory.open(f"sqlite:///{tmp_path}/m.db", embedder=HashingEmbedder(64)) as again:
        rec = await again.get([alice], first.record.id)
        assert rec.access_count == 8 and rec.last_access_at is not None
