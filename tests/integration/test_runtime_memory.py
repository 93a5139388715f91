"""``rt.memory``: long-term memory in the runtime's own store, off the event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from dormant import Agent, ModelReply, ModelRequest, Runtime, ScriptedModel
from dormant.errors import NotFound, UsageError
from dormant.memory import HashingEmbedder, MiniLMEmbedder


def agent() -> Agent:
    def script(request: ModelRequest) -> ModelReply:
        return ModelReply(text="ok")

    return Agent(name="a", model=ScriptedModel(script))


@pytest.mark.parametrize("scheme", ["memory", "sqlite"])
async def test_rt_memory_add_recall_get_history_forget_bind_rebind(scheme: str, tmp_path: Path) -> None:
    url = "memory://" if scheme == "memory" else f"sqlite:///{tmp_path}/rt.db"
    async with Runtime(url, [agent()], memory_embedder=HashingEmbedder(64)) as rt:
        alice = await rt.memory.bind({"phone": "+15550100", "device": "alice-phone"})
        bob = await rt.memory.bind({"phone": "+15550100", "device": "bob-tablet"})
        first = await rt.memory.add(alice, "my parcel was boxed on Monday", tags={"order": "ORD-1"})
        await rt.memory.add(bob, "bob likes green tea")
        hits = (await rt.memory.recall([alice], "parcel boxed")).hits
        assert [h.record.id for h in hits] == [first.record.id]
        assert (await rt.memory.get([alice], first.record.id)).text == "my parcel was boxed on Monday"
        with pytest.raises(NotFound):
            await rt.memory.get([bob], first.record.id)  # same phone, other device: not bob's
        await rt.memory.forget([alice], first.record.id, reason="asked to")
        assert (await rt.memory.recall([alice], "parcel boxed")).hits == ()
        new_device = await rt.memory.bind({"phone": "+15550100", "device": "alice-new"})
        assert await rt.memory.rebind(alice, new_device) == 1
        ops = [c.op for c in (await rt.memory.history([new_device], record_id=first.record.id)).items]
        assert ops == ["add", "forget", "rebind"]
        status = rt.memory.status()
        assert status.embedder == "hashing-64" and status.embedder_loaded
        assert status.embedder_rss_bytes == 0 and status.vector_available
        # the records are the store's: the runtime's own store writer commits them
        before = rt.store.commits
        await rt.memory.add(bob, "bob moved to Lyon")
        assert rt.store.commits == before + 1


async def test_rt_memory_needs_an_open_runtime() -> None:
    rt = Runtime("memory://", [agent()], memory_embedder=HashingEmbedder(64))
    with pytest.raises(UsageError, match="open the runtime"):
        _ = rt.memory


async def test_rt_memory_keeps_the_event_loop_free_while_embedding() -> None:
    """The embedder runs in a worker thread: the loop keeps ticking during a slow embed."""

    class SlowEmbedder(HashingEmbedder):
        def embed(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
            time.sleep(0.3)
            return super().embed(texts)

    async with Runtime("memory://", [agent()], memory_embedder=SlowEmbedder(64)) as rt:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.create_task(tick())
        await rt.memory.add("b1_" + "0" * 64, "slow to embed")
        ticker.cancel()
        assert ticks >= 10


def test_the_default_embedder_is_minilm_unloaded() -> None:
    async def main() -> None:
        async with Runtime("memory://", [agent()]) as rt:
            status = rt.memory.status()
            assert isinstance(rt.memory.core.embedder, MiniLMEmbedder)
            assert status.embedder_loaded is False and status.embedder_rss_bytes == 0

    asyncio.run(main())


async def test_rt_memory_of_a_real_tenant_is_scoped_by_its_id(tmp_path: Path) -> None:
    """``for_tenant`` looks the tenant up in the store (name or id): records carry its id,
    the default tenant and other tenants never see them, an unknown tenant is NotFound."""
    async with Runtime(f"sqlite:///{tmp_path}/t.db", [agent()], memory_embedder=HashingEmbedder(64)) as rt:
        acme = await rt.store.create_tenant("acme")
        globex = await rt.store.create_tenant("globex")
        by_name = await rt.memory.for_tenant("acme")
        by_id = await rt.memory.for_tenant(acme.id)
        assert by_name.tenant == by_id.tenant == acme.id
        key = await by_name.bind({"phone": "+15550100"})
        added = await by_name.add(key, "acme's customer wants a refund", thread=f"{acme.id}/chat-1")
        assert added.record.tenant == acme.id
        assert [h.record.id for h in (await by_id.recall([key], "refund")).hits] == [added.record.id]
        other = await rt.memory.for_tenant("globex")
        assert other.tenant == globex.id
        for outsider in (rt.memory, other):
            assert (await outsider.recall([key], "refund")).hits == ()
            with pytest.raises(NotFound):
                await outsider.get([key], added.record.id)
        with pytest.raises(NotFound):
            await rt.memory.for_tenant("initech")


async def test_rt_memory_embedder_by_name() -> None:
    async with Runtime("memory://", [agent()], memory_embedder="none") as rt:
        assert rt.memory.status().embedder is None
        key = await rt.memory.bind({"phone": "+15550100"})
        await rt.memory.add(key, "Prefers tea", kind="preference")
        got = await rt.memory.recall(key, "what does she drink")
        assert [h.record.text for h in got.hits] == ["Prefers tea"], "text-only falls back to recency"
    async with Runtime("memory://", [agent()], memory_embedder="hashing") as rt:
        assert (rt.memory.status().embedder or "").startswith("hashing")
