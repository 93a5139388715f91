"""Images and files through the runtime: stored once as blobs, sent to a vision model as
data URIs read from the store, to a text-only model as placeholders; refused parts
leave nothing behind."""

from __future__ import annotations

import base64
import dataclasses
import itertools
from pathlib import Path
from typing import Any

import apsw
import pytest

from dormant import Agent, Runtime
from dormant.bench.images import noise_png
from dormant.errors import PayloadTooLarge, UnsupportedMedia
from dormant.models.openai import OpenAIChatModel
from dormant.parts import File, Image, Text
from dormant.parts import budget as part_budget
from dormant.parts.budget import PartBudget, encoded_size
from tests.helpers import all_messages
from tests.integration.conftest import fast_settings
from tests.media_samples import pdf, png
from tests.openai_server import ScriptServer, fresh_breakers, server, text_reply

__all__ = ["fresh_breakers", "server"]  # fixtures, used by name


def blob_rows(path: Path) -> tuple[int, int]:
    conn = apsw.Connection(str(path))
    blobs = conn.execute("SELECT count(*) FROM blobs").fetchone()
    refs = conn.execute("SELECT count(*) FROM blob_refs").fetchone()
    conn.close()
    assert blobs is not None and refs is not None
    return int(blobs[0]), int(refs[0])


async def test_a_vision_model_gets_the_image_and_a_text_only_one_its_placeholder(
    tmp_path: Path, server: ScriptServer
) -> None:
    photo = tmp_path / "parcel.png"
    photo.write_bytes(png(300, 200))
    vision = OpenAIChatModel(model="v", base_url=server.base_url, max_retries=0, dialect="vision")
    plain = OpenAIChatModel(model="p", base_url=server.base_url, max_retries=0, dialect="generic")
    server.script(text_reply("a red box"), text_reply("ok"))
    agents = [Agent(name="v", model=vision, builtins=False), Agent(name="p", model=plain, builtins=False)]
    db = tmp_path / "d.db"
    try:
        async with Runtime(f"sqlite:///{db}", agents, settings=fast_settings()) as rt:
            await rt.send(
                "t1", parts=[Text("what is this?"), Image(photo), File(pdf("No 4711"), name="i.pdf")]
            )
            await rt.send("t2", "and this?", agent="p", parts=[Image(png(300, 200), name="parcel.png")])
            await rt.run_until_idle(timeout=20)
            first = (await all_messages(rt.store, "t1"))[0]
            assert first.content == "what is this?"
            image, invoice = first.parts
            assert (image.kind, image.media_type, image.width, image.height, image.name) == (
                "image",
                "image/png",
                300,
                200,
                "parcel.png",
            )
            assert (invoice.media_type, invoice.text, invoice.name) == ("application/pdf", "No 4711", "i.pdf")
    finally:
        await vision.aclose()
        await plain.aclose()
    sent = {r.body["model"]: r.body["messages"][-1]["content"] for r in server.received}
    image_part, text_part = sent["v"][1], sent["v"][2]
    assert sent["v"][0] == {"type": "text", "text": "what is this?"}
    assert image_part["type"] == "image_url" and image_part["image_url"]["detail"] == "auto"
    url = image_part["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == png(300, 200)
    assert text_part == {
        "type": "text",
        "text": f"[file: i.pdf, application/pdf, {invoice.size} bytes]\nNo 4711",
    }
    assert sent["p"] == "and this?\n\n[image: parcel.png, 300\N{MULTIPLICATION SIGN}200, no text]"
    # the same picture in two threads is one blob, referred to by both
    assert blob_rows(db) == (2, 3)


async def test_a_refused_part_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    agent = Agent(
        name="a", model=OpenAIChatModel(model="m", base_url="http://127.0.0.1:9/v1"), builtins=False
    )
    settings = fast_settings(max_part_bytes=64 * 1024)
    async with Runtime(f"sqlite:///{db}", [agent], settings=settings) as rt:
        with pytest.raises(UnsupportedMedia):  # the second part is refused: the first is not stored
            await rt.send("t", "x", parts=[Image(png()), Image(b"MZ\x90\x00" + bytes(100), name="a.jpg")])
        with pytest.raises(PayloadTooLarge):
            await rt.send("t", "x", parts=[File(bytes(70 * 1024))])
    assert blob_rows(db) == (0, 0)
    conn = apsw.Connection(str(db))
    assert conn.execute("SELECT count(*) FROM threads").fetchone() == (0,)
    conn.close()


async def test_a_full_view_sends_its_oldest_image_as_text_and_keeps_its_text(
    tmp_path: Path, server: ScriptServer
) -> None:
    """Through the runtime (store, view cache, slice): once the thread no longer fits the
    window with its old photo, the photo goes as its placeholder while its message's text
    (and every note after it) stays; before, it went as an image."""
    model = OpenAIChatModel(
        model="v",
        base_url=server.base_url,
        max_retries=0,
        dialect="vision",
        context_window=4000,
        max_output_tokens=200,
    )
    agent = Agent(name="v", model=model, builtins=False)
    server.script(*(text_reply("ok") for _ in range(60)))

    def parcel(messages: list[dict[str, Any]]) -> list[Any] | None:
        found = [m["content"] for m in messages if "the parcel as it came" in str(m["content"])]
        return found[0] if found else None

    async with Runtime(
        f"sqlite:///{tmp_path / 'd.db'}", [agent], settings=fast_settings(compaction_share=0.0)
    ) as rt:
        await rt.send("t", parts=[Text("the parcel as it came"), Image(png(1024, 768), name="parcel.png")])
        await rt.run_until_idle(timeout=20)
        shown: list[Any] | None = parcel(server.received[-1].body["messages"])
        assert shown is not None and shown[1]["type"] == "image_url"
        notes = 0
        while shown is not None and shown[1]["type"] == "image_url" and notes < 50:
            await rt.send("t", f"note {notes}: " + "word " * 100)
            await rt.run_until_idle(timeout=20)
            notes += 1
            shown = parcel(messages := server.received[-1].body["messages"])
    assert shown == [
        {"type": "text", "text": "the parcel as it came"},
        {"type": "text", "text": "[image: parcel.png, 1024\N{MULTIPLICATION SIGN}768, no text]"},
    ], "the photo's message stays, its photo as text"
    assert sum("note " in str(m["content"]) for m in messages) == notes  # no note left out


async def test_slices_with_images_take_turns_under_the_part_budget(
    tmp_path: Path, server: ScriptServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six slices at once, each request two incompressible images (~525 KB as base64),
    under a 1 MiB budget: the requests reach the server one at a time, every slice ends."""
    budget = PartBudget()
    monkeypatch.setattr(part_budget, "SHARED", budget)
    vision = OpenAIChatModel(model="v", base_url=server.base_url, max_retries=0, dialect="vision")
    server.script(*(dataclasses.replace(text_reply("seen"), delay=0.2) for _ in range(6)))
    settings = fast_settings(part_bytes_in_flight=1024 * 1024, concurrency=6)
    try:
        async with Runtime(
            f"sqlite:///{tmp_path / 'd.db'}", [Agent(name="v", model=vision)], settings=settings
        ) as rt:
            assert budget.limit == 1024 * 1024  # the runtime set the process's budget
            for i in range(6):
                await rt.send(f"t{i}", "look", parts=[Image(noise_png(2 * i)), Image(noise_png(2 * i + 1))])
            await rt.run_until_idle(timeout=30)
            for i in range(6):
                assert [m.content for m in await all_messages(rt.store, f"t{i}")][-1] == "seen"
    finally:
        await vision.aclose()
    one = 2 * encoded_size(len(noise_png(0)))
    s = budget.stats()
    assert (s.held, s.holders, s.waiting) == (0, 0, 0)
    assert s.peak == one and s.waits >= 1
    arrivals = sorted(r.at for r in server.received)
    assert len(arrivals) == 6
    assert all(b - a >= 0.15 for a, b in itertools.pairwise(arrivals))  # one at a time
