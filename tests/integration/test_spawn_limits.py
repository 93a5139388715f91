"""spawn_thread is bounded: a model that spawns on every turn used to nest
threads until the 256-byte id limit failed the deepest one."""

from __future__ import annotations

import itertools

from dormant import Agent, ModelReply, ModelRequest, Runtime, ScriptedModel, ToolCall
from dormant.tools.builtins import spawn_depth
from tests.helpers import all_messages, check_history
from tests.integration.conftest import fast_settings

_ids = itertools.count(1)


def spawn_happy(request: ModelRequest) -> ModelReply:
    """Spawns a child (twice in one reply) for every user text; else just answers."""
    last = request.messages[-1]
    if last.role == "user":
        calls = tuple(
            ToolCall(id=f"s{next(_ids)}", name="spawn_thread", arguments='{"task": "do it"}')
            for _ in range(2)
        )
        return ModelReply(text="spawning", tool_calls=calls)
    return ModelReply(text=f"noted: {last.content[:60]}")


async def test_spawning_stops_at_the_depth_and_fan_out_limits(store_url: str) -> None:
    agent = Agent(
        name="a", model=ScriptedModel(spawn_happy), builtins=True, max_spawn_depth=2, max_children=3
    )
    async with Runtime(store_url, [agent], settings=fast_settings()) as rt:
        await rt.send("root", "hello", key="k1")
        await rt.run_until_idle(timeout=30)
        await rt.send("root", "again", key="k2")  # 2 more spawns: the fan-out limit refuses one
        await rt.run_until_idle(timeout=30)
        threads = (await rt.threads(limit=100)).items
        depths = {t.id: spawn_depth(t.id) for t in threads}
        assert max(depths.values()) == 2, depths
        assert all(t.status == "active" for t in threads), "no thread failed"
        children_of_root = [t for t in threads if t.parent_id == "root"]
        assert len(children_of_root) == 3, "fan-out 3"
        assert len(threads) == 1 + 3 + 3 * 2, "depth 2: root, its 3 children, 2 grandchildren each"

        root = await all_messages(rt.store, "root")
        check_history(root)
        results = [m.content for m in root if m.role == "tool"]
        assert sum(r.startswith("spawned thread ") for r in results) == 3
        assert results[-1].startswith("error: this thread already spawned 3 threads, the limit is 3")
        grandchild = next(t for t in threads if depths[t.id] == 2)
        deepest = await all_messages(rt.store, grandchild.id)
        errors = [m.content for m in deepest if m.role == "tool"]
        assert errors and all(
            e.startswith("error: this thread is 2 spawns deep, the limit is 2") for e in errors
        )


def test_spawn_depth_counts_spawn_segments_only() -> None:
    assert spawn_depth("root") == 0
    assert spawn_depth("a/b") == 0, "a root id may hold a slash"
    assert spawn_depth("root/call_1.2.0") == 1
    assert spawn_depth("root/call_1.2.0/x.5.1") == 2
