"""The image a tool returned, through the REST API: its facts on the tool message in
/messages, its bytes at the thread's /blobs route, and nothing of it for another thread
of the same tenant or for another tenant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from dormant import Agent, ModelReply, ModelRequest, ScriptedModel, ToolCall, tool
from dormant.parts import Image
from tests.helpers import eventually
from tests.media_samples import png
from tests.server.support import serve


@tool(mode="async")
async def snap() -> Image:
    """A screenshot."""
    return Image(png(70, 50), name="shot.png")


def script(req: ModelRequest) -> ModelReply:
    if req.messages[-1].role == "user" and req.messages[-1].content == "snap":
        return ModelReply(text="", tool_calls=(ToolCall(id="c1", name="snap", arguments="{}"),))
    return ModelReply(text="ok")


async def messages(c: httpx.AsyncClient, thread: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (await c.get(f"/v1/threads/{thread}/messages")).json()["items"]
    return items


async def test_a_tool_results_image_is_served_to_its_thread_only(tmp_path: Path) -> None:
    agent = Agent(name="assistant", model=ScriptedModel(script), tools=[snap])
    async with serve([agent], store=f"sqlite:///{tmp_path}/d.db") as s, s.client() as c:
        for thread, text in (("t1", "snap"), ("t2", "hello")):
            assert (await c.post(f"/v1/threads/{thread}/inputs", json={"content": text})).status_code == 202

        async def answered() -> bool:
            return len(await messages(c, "t1")) >= 4 and len(await messages(c, "t2")) >= 2

        await eventually(answered, timeout=20)
        (result,) = [m for m in await messages(c, "t1") if m["role"] == "tool"]
        (part,) = result["parts"]
        assert (part["kind"], part["media_type"], part["width"], part["height"], part["name"]) == (
            "image",
            "image/png",
            70,
            50,
            "shot.png",
        )
        served = await c.get(f"/v1/threads/t1/blobs/{part['ref']}")
        assert served.status_code == 200 and served.content == png(70, 50)
        assert served.headers["content-type"] == "image/png"
        assert (await c.get(f"/v1/threads/t2/blobs/{part['ref']}")).status_code == 404
        async with s.client(key=s.key_b) as other:
            assert (await other.get(f"/v1/threads/t1/blobs/{part['ref']}")).status_code == 404
