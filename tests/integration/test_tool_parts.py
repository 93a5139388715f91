"""Tools that return images and files, in real slices: the parts are checked like a user's,
stored once, kept on the tool message (inline, or through the outbox on every backend),
sent to a vision model with their bytes and to a text-only one as placeholders; a refused
one is an error the model reads, with nothing stored; ``read_blob`` reads a part by its
reference in the thread that holds it, and nowhere else."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import apsw
import pytest

from dormant import Agent, ModelReply, ModelRequest, Runtime, ScriptedModel, ToolCall, tool
from dormant.models.openai import OpenAIChatModel
from dormant.parts import File, Image
from dormant.records import Message
from tests.helpers import all_messages, check_history
from tests.integration.conftest import fast_settings
from tests.media_samples import pdf, png
from tests.openai_server import DONE, Reply, ScriptServer, delta, fresh_breakers, server, text_reply

__all__ = ["fresh_breakers", "server"]  # fixtures, used by name

EXE = b"MZ\x90\x00" + bytes(200)  # an executable that says it is an image


def blob_rows(path: Path) -> tuple[int, int]:
    conn = apsw.Connection(str(path))
    row = conn.execute("SELECT (SELECT count(*) FROM blobs), (SELECT count(*) FROM blob_refs)").fetchone()
    conn.close()
    assert row is not None
    return int(row[0]), int(row[1])


class Caller:
    """Calls ``tool`` on a user message, then answers; records every request it gets."""

    def __init__(self, tool: str, arguments: dict[str, Any] | None = None) -> None:
        self.tool = tool
        self.arguments = arguments or {}
        self.requests: list[ModelRequest] = []

    def __call__(self, req: ModelRequest) -> ModelReply:
        self.requests.append(req)
        if req.messages[-1].role == "user":
            call = ToolCall(id="c1", name=self.tool, arguments=json.dumps(self.arguments))
            return ModelReply(text="", tool_calls=(call,))
        return ModelReply(text="seen")


def tool_message(history: list[Message]) -> Message:
    (found,) = [m for m in history if m.role == "tool"]
    return found


async def test_an_inline_tool_returns_an_image_from_a_path_and_the_model_sees_it(tmp_path: Path) -> None:
    chart_file = tmp_path / "chart.png"
    chart_file.write_bytes(png(120, 80))

    @tool
    def chart() -> list[object]:
        """Draw the chart."""
        return ["the chart of March", Image(chart_file, alt="sales up 4%")]

    model = Caller("chart")
    agent = Agent(name="a", model=ScriptedModel(model), tools=[chart])
    async with Runtime(f"sqlite:///{tmp_path}/d.db", [agent], settings=fast_settings()) as rt:
        await rt.send("t1", "draw it")
        await rt.run_until_idle(timeout=20)
        history = await all_messages(rt.store, "t1")
        check_history(history)
        result = tool_message(history)
        assert result.content == "the chart of March"
        (part,) = result.parts
        assert (part.kind, part.media_type, part.width, part.height, part.name, part.text) == (
            "image",
            "image/png",
            120,
            80,
            "chart.png",
            "sales up 4%",
        )
        seen = model.requests[-1]
        assert seen.messages[-1].parts == (part,)  # the next round shows it, in this slice
        assert seen.blobs is not None and await seen.blobs(part.ref) == png(120, 80)
    assert blob_rows(tmp_path / "d.db") == (1, 1)


async def test_an_async_tool_returns_an_image_and_a_file_through_the_outbox(store_url: str) -> None:
    @tool(mode="async")
    async def scan() -> list[object]:
        """Scan the invoice."""
        return [Image(png(64, 48), name="page.png"), "scanned", File(pdf("No 4711"), name="invoice.pdf")]

    model = Caller("scan")
    agent = Agent(name="a", model=ScriptedModel(model), tools=[scan])
    async with Runtime(store_url, [agent], settings=fast_settings()) as rt:
        await rt.send("t1", "scan it")
        await rt.run_until_idle(timeout=30)
        history = await all_messages(rt.store, "t1")
        check_history(history)
        result = tool_message(history)
        assert result.source == "tool_result" and result.content == "scanned"
        image, invoice = result.parts
        assert (image.kind, image.name, image.width, image.height) == ("image", "page.png", 64, 48)
        assert (invoice.kind, invoice.media_type, invoice.text) == ("file", "application/pdf", "No 4711")
        assert model.requests[-1].messages[-1].parts == (image, invoice)
        assert await rt.store.read_blob("t1", invoice.ref, 0, 1 << 20) == pdf("No 4711")


@pytest.mark.parametrize("mode", ["inline", "async"])
async def test_a_bad_image_from_a_tool_is_an_error_the_model_reads_and_nothing_is_stored(
    tmp_path: Path, mode: str
) -> None:
    def fake() -> list[object]:
        return [Image(png()), Image(EXE, name="photo.jpg")]  # the first is fine, the second is not

    spec = tool(fake, mode=mode)  # type: ignore[call-overload]
    model = Caller("fake")
    agent = Agent(name="a", model=ScriptedModel(model), tools=[spec])
    async with Runtime(f"sqlite:///{tmp_path}/d.db", [agent], settings=fast_settings()) as rt:
        await rt.send("t1", "go")
        await rt.run_until_idle(timeout=20)
        result = tool_message(await all_messages(rt.store, "t1"))
    assert result.parts == ()
    assert result.content.startswith("error: the tool's images or files were refused: an image part is not")
    assert blob_rows(tmp_path / "d.db") == (0, 0)  # not even the good image


async def test_an_image_over_the_part_limit_from_a_tool_is_refused(tmp_path: Path) -> None:
    @tool
    def big() -> Image:
        return Image(png(400, 400))  # 1,387 bytes

    model = Caller("big")
    agent = Agent(name="a", model=ScriptedModel(model), tools=[big])
    settings = fast_settings(max_part_bytes=1024)
    async with Runtime(f"sqlite:///{tmp_path}/d.db", [agent], settings=settings) as rt:
        await rt.send("t1", "go")
        await rt.run_until_idle(timeout=20)
        result = tool_message(await all_messages(rt.store, "t1"))
    assert "over the limit of 1024" in result.content and result.parts == ()
    assert blob_rows(tmp_path / "d.db") == (0, 0)


def tool_call_reply(name: str) -> Reply:
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": name, "arguments": "{}"}}
    chunks = [
        delta({"role": "assistant", "content": None, "tool_calls": [call]}),
        delta({}, "tool_calls"),
        DONE,
    ]
    return Reply(chunks=chunks)


@pytest.mark.parametrize("dialect", ["vision", "generic"])
async def test_the_adapter_sends_a_tool_results_image_as_the_server_accepts_it(
    tmp_path: Path, server: ScriptServer, dialect: str
) -> None:
    @tool
    def snap() -> Image:
        """Take a screenshot."""
        return Image(png(90, 60), name="page.png")

    model = OpenAIChatModel(model="m", base_url=server.base_url, max_retries=0, dialect=dialect)
    server.script(tool_call_reply("snap"), text_reply("the page is red"))
    agent = Agent(name="a", model=model, tools=[snap], builtins=False)
    try:
        async with Runtime(f"sqlite:///{tmp_path}/d.db", [agent], settings=fast_settings()) as rt:
            await rt.send("t1", "look at the page")
            await rt.run_until_idle(timeout=20)
            (part,) = tool_message(await all_messages(rt.store, "t1")).parts
    finally:
        await model.aclose()
    sent = server.received[-1].body["messages"]
    shown = "[image: page.png, 90\N{MULTIPLICATION SIGN}60, no text]"
    assert sent[-2 if dialect == "vision" else -1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": shown,
    }
    if dialect == "generic":
        assert "image_url" not in json.dumps(sent)
        return
    url = "data:image/png;base64," + base64.b64encode(png(90, 60)).decode()
    assert sent[-1] == {
        "role": "user",
        "content": [{"type": "image_url", "image_url": {"url": url, "detail": "auto"}}],
    }
    assert part.size == len(png(90, 60))


async def test_read_blob_reads_a_part_in_its_own_thread_only(tmp_path: Path) -> None:
    notes = b"line one\nline two\n"

    class Reader:
        def __init__(self) -> None:
            self.refs: dict[str, str] = {}
            self.answers: dict[str, list[str]] = {}

        def __call__(self, req: ModelRequest) -> ModelReply:
            last = req.messages[-1]
            if last.role == "tool":
                self.answers.setdefault(req.thread_id, []).append(last.content)
            if req.thread_id == "owner" and last.role == "user":
                for part in last.parts:
                    self.refs[part.media_type] = part.ref
            asks = [r for r in self.refs.values() if r not in self.asked(req)]
            if asks:
                return ModelReply(
                    text="",
                    tool_calls=(ToolCall(id="r", name="read_blob", arguments=json.dumps({"ref": asks[0]})),),
                )
            return ModelReply(text="done")

        def asked(self, req: ModelRequest) -> set[str]:
            return {json.loads(c.arguments)["ref"] for m in req.messages for c in m.tool_calls}

    reader = Reader()
    agent = Agent(name="a", model=ScriptedModel(reader))
    async with Runtime(f"sqlite:///{tmp_path}/d.db", [agent], settings=fast_settings()) as rt:
        await rt.send("owner", "read these", parts=[File(notes, name="notes.txt"), Image(png(20, 20))])
        await rt.run_until_idle(timeout=20)
        await rt.send("stranger", "and you?")
        await rt.run_until_idle(timeout=20)
    text, image = reader.answers["owner"]
    assert text == f"line one\nline two\n\n[bytes 0-{len(notes)} of {len(notes)}; end of blob]"
    assert image.startswith(f"[blob {reader.refs['image/png']} is an image (image/png, ")
    assert len(reader.answers["stranger"]) == 2  # the same refs, from a thread that never had them
    assert all(a.startswith("error: no blob ") for a in reader.answers["stranger"])
