"""MCP results with images and files become the tool result's content parts: a real SDK
server over stdio answers with ``ImageContent`` and an embedded PDF, checked and stored
like a user's parts; an image that is not one makes the result an error, nothing stored."""

from __future__ import annotations

import json
from pathlib import Path

import apsw

from dormant import Agent, ModelReply, ModelRequest, Runtime, ScriptedModel, ToolCall
from dormant.records import Message
from tests.helpers import all_messages, check_history
from tests.integration.conftest import fast_settings
from tests.mcp_servers import media_server
from tests.media_samples import pdf, png


def script(req: ModelRequest) -> ModelReply:
    last = req.messages[-1]
    if last.role == "user":
        name = {"c": "media__chart", "i": "media__invoice", "f": "media__fake_image"}[req.thread_id]
        return ModelReply(text="", tool_calls=(ToolCall(id="c1", name=name, arguments=json.dumps({})),))
    return ModelReply(text="got it")


def result_of(history: list[Message]) -> Message:
    (result,) = [m for m in history if m.role == "tool"]
    return result


async def test_an_mcp_image_and_an_embedded_pdf_become_parts_and_a_fake_image_an_error(
    tmp_path: Path,
) -> None:
    db = tmp_path / "d.db"
    agent = Agent(name="a", model=ScriptedModel(script), mcp=[media_server()])
    async with Runtime(f"sqlite:///{db}", [agent], settings=fast_settings()) as rt:
        for thread in ("c", "i", "f"):
            await rt.send(thread, "go")
        await rt.run_until_idle(timeout=60)
        results = {}
        for thread in ("c", "i", "f"):
            history = await all_messages(rt.store, thread)
            check_history(history)
            results[thread] = result_of(history)
        (image,) = results["c"].parts
        (invoice,) = results["i"].parts
        assert await rt.store.read_blob("c", image.ref, 0, 1 << 20) == png(80, 60)
        assert await rt.store.read_blob("i", invoice.ref, 0, 1 << 20) == pdf("Invoice 4711")
    assert results["c"].content == "sales by month"
    assert (image.kind, image.media_type, image.width, image.height) == ("image", "image/png", 80, 60)
    assert results["i"].content == "the invoice"
    assert (invoice.kind, invoice.media_type, invoice.name, invoice.text) == (
        "file",
        "application/pdf",
        "4711.pdf",
        "Invoice 4711",
    )
    fake = results["f"]
    assert fake.parts == ()
    assert fake.content.startswith(
        "error: the tool's images or files were refused: an image part is not an image"
    )
    conn = apsw.Connection(str(db))
    assert conn.execute("SELECT count(*) FROM blobs").fetchone() == (2,)  # the chart and the invoice only
    conn.close()
