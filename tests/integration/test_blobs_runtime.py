"""Large tool outputs end to end: stored as blobs, shown as excerpts, read back with the
read_blob tool, streamed without being held in memory."""

from __future__ import annotations

import asyncio
import json
import re
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

from dormant import Agent, ModelReply, ModelRequest, Runtime, ScriptedModel, ToolCall, tool
from dormant.tools.blobs import EXCERPT_BYTES
from tests.helpers import all_messages, check_history, eventually
from tests.integration.conftest import fast_settings

REF = re.compile(r"sha256:[0-9a-f]{64}")
ROW = 16  # bytes per row of the generated output
MB = 1024 * 1024


def rows(first: int, count: int) -> bytes:
    return b"".join(b"row %011d\n" % n for n in range(first, first + count))


async def output(size: int, piece: int = 64 * 1024) -> AsyncIterator[bytes]:
    """``size`` bytes of numbered rows, produced piece by piece (never held whole)."""
    per_piece = piece // ROW
    for first in range(0, size // ROW, per_piece):
        yield rows(first, min(per_piece, size // ROW - first))
        await asyncio.sleep(0)


async def test_a_large_async_tool_output_becomes_a_blob_the_model_reads_inline(store_url: str) -> None:
    size = 5 * MB

    @tool(mode="async", timeout=120)
    async def dump() -> AsyncIterator[bytes]:
        """Print the whole table."""
        return output(size)

    reads: list[str] = []

    def script(req: ModelRequest) -> ModelReply:
        last = req.messages[-1]
        if last.role == "user":
            return ModelReply(text="", tool_calls=(ToolCall(id="call_dump", name="dump", arguments="{}"),))
        if last.role == "tool" and last.content.startswith("[tool output stored as blob"):
            (ref,) = REF.findall(last.content)
            args = json.dumps({"ref": ref, "offset": 1_000_000, "length": 100})
            return ModelReply(
                text="", tool_calls=(ToolCall(id="call_read", name="read_blob", arguments=args),)
            )
        reads.append(last.content)
        return ModelReply(text="read it")

    agent = Agent(name="a", model=ScriptedModel(script), tools=[dump])
    async with Runtime(store_url, [agent], settings=fast_settings()) as rt:
        await rt.send("t1", "dump the table", key="k1")
        await rt.run_until_idle(timeout=60)

        history = await all_messages(rt.store, "t1")
        check_history(history)
        assert [m.role for m in history] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
        stored = history[2].content
        (ref,) = REF.findall(stored)
        assert stored.startswith(f"[tool output stored as blob {ref} — {size:,} bytes;")
        assert rows(0, 3).decode() in stored and rows(size // ROW - 3, 3).decode() in stored
        assert f"[… {size - 2 * EXCERPT_BYTES:,} bytes cut …]" in stored
        assert len(stored.encode()) < 2 * EXCERPT_BYTES + 1024

        expected = rows(1_000_000 // ROW, 1 + 100 // ROW)[1_000_000 % ROW :][:100].decode()
        assert reads == [f"{expected}\n[bytes 1000000-1000100 of {size}; next offset 1000100]"]
        assert history[4].content == reads[0]
        assert await rt.store.read_blob("t1", ref, size - ROW, 100) == rows(size // ROW - 1, 1)
        assert (await rt.store.get_blob("t1", ref)).size == size


async def test_an_inline_output_over_the_threshold_is_stashed(store_url: str) -> None:
    @tool
    def listing() -> bytes:
        """A long listing, as bytes."""
        return rows(0, 10_000)

    def script(req: ModelRequest) -> ModelReply:
        if req.messages[-1].role == "user":
            return ModelReply(text="", tool_calls=(ToolCall(id="c1", name="listing", arguments="{}"),))
        return ModelReply(text="ok")

    agent = Agent(name="a", model=ScriptedModel(script), tools=[listing])
    async with Runtime(store_url, [agent], settings=fast_settings(blob_threshold_bytes=4096)) as rt:
        await rt.send("t1", "list", key="k1")
        await rt.run_until_idle(timeout=30)
        answer = next(m for m in await all_messages(rt.store, "t1") if m.role == "tool")
        (ref,) = REF.findall(answer.content)
        assert (await rt.store.get_blob("t1", ref)).size == 10_000 * ROW
        assert answer.content.endswith(rows(9_999, 1).decode())


async def test_a_large_posted_tool_result_is_stashed(store_url: str) -> None:
    gate = asyncio.Event()
    running = asyncio.Event()

    @tool(mode="async")
    async def webhook() -> str:
        """Answered from outside while it runs."""
        running.set()
        await gate.wait()
        return "from the dispatcher"

    def script(req: ModelRequest) -> ModelReply:
        if req.messages[-1].role == "user":
            return ModelReply(text="", tool_calls=(ToolCall(id="c1", name="webhook", arguments="{}"),))
        return ModelReply(text="ok")

    agent = Agent(name="a", model=ScriptedModel(script), tools=[webhook])
    async with Runtime(store_url, [agent], settings=fast_settings()) as rt:
        runner = asyncio.create_task(rt.run())
        try:
            await rt.send("t1", "go", key="k1")
            await asyncio.wait_for(running.wait(), 10)
            (entry,) = (await rt.store.list_outbox(status="running")).items
            posted = await rt.post_tool_result("t1", entry.call_id, output(MB, piece=1000))
            assert not posted.duplicate
            gate.set()

            async def answered() -> bool:
                return (await rt.thread("t1")).last_seq == 4

            await eventually(answered)
        finally:
            gate.set()
            rt.stop()
            await runner
        history = await all_messages(rt.store, "t1")
        check_history(history)
        (ref,) = REF.findall(history[2].content)
        assert await rt.store.read_blob("t1", ref, MB - ROW, 100) == rows(MB // ROW - 1, 1)


async def test_a_50_mb_streamed_output_is_never_held_in_memory(tmp_path: Path) -> None:
    size = 50 * MB
    block = rows(0, 64 * 1024 // ROW)

    @tool(mode="async", timeout=300)
    async def firehose() -> AsyncIterator[bytes]:
        """A lot of output."""

        async def gen() -> AsyncIterator[bytes]:
            for _ in range(size // len(block)):
                yield block

        return gen()

    def script(req: ModelRequest) -> ModelReply:
        if req.messages[-1].role == "user":
            return ModelReply(text="", tool_calls=(ToolCall(id="c1", name="firehose", arguments="{}"),))
        return ModelReply(text="done")

    agent = Agent(name="a", model=ScriptedModel(script), tools=[firehose])
    async with Runtime(f"sqlite:///{tmp_path}/d.db", [agent], settings=fast_settings()) as rt:
        await rt.send("t1", "go", key="k1")
        tracemalloc.start()
        try:
            await rt.run_until_idle(timeout=120)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        history = await all_messages(rt.store, "t1")
        (ref,) = REF.findall(history[2].content)
        assert (await rt.store.get_blob("t1", ref)).size == size
    assert peak < 8 * MB, f"peak {peak / MB:.1f} MB while storing {size / MB:.0f} MB"
