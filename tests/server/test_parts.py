"""Images and files through the REST API: JSON parts, refusals (413, 415, 422) with nothing
written, the parts' facts in /messages and their bytes at /blobs, tenant-scoped."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import httpx

from dormant.agent import Agent
from dormant.models import ModelReply, ScriptedModel, echo_model
from dormant.models.base import ModelRequest
from tests.helpers import eventually
from tests.media_samples import bomb_png, pdf, png
from tests.server.support import serve

AGENTS = [Agent(name="assistant", model=echo_model())]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def messages(c: httpx.AsyncClient, thread: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (await c.get(f"/v1/threads/{thread}/messages")).json()["items"]
    return items


async def test_json_parts_are_stored_shown_and_served(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/d.db"
    async with serve(AGENTS, store=store) as s, s.client() as c:
        body = {
            "content": "my parcel",
            "parts": [
                {"type": "image", "data": b64(png(40, 30)), "name": "parcel.png", "text": "a red box"},
                {"type": "file", "data": b64(pdf("No 4711")), "name": "invoice.pdf"},
            ],
        }
        r = await c.post("/v1/threads/t1/inputs", json=body)
        assert r.status_code == 202, r.text

        async def replied() -> bool:
            return len(await messages(c, "t1")) >= 2

        await eventually(replied)
        first = (await messages(c, "t1"))[0]
        image, invoice = first["parts"]
        assert {k: image[k] for k in ("kind", "media_type", "width", "height", "name", "text")} == {
            "kind": "image",
            "media_type": "image/png",
            "width": 40,
            "height": 30,
            "name": "parcel.png",
            "text": "a red box",
        }
        assert "data" not in image and invoice["text"] == "No 4711"
        served = await c.get(f"/v1/threads/t1/blobs/{image['ref']}")
        assert served.status_code == 200 and served.content == png(40, 30)
        assert served.headers["content-type"] == "image/png"
        assert served.headers["x-content-type-options"] == "nosniff"
        assert (await c.get(f"/v1/threads/t1/blobs/{invoice['ref']}")).headers[
            "content-type"
        ] == "application/pdf"
        async with s.client(key=s.key_b) as other:  # another tenant sees neither thread nor blob
            assert (await other.get(f"/v1/threads/t1/blobs/{image['ref']}")).status_code == 404


async def test_refused_parts_answer_413_415_422_and_write_nothing(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/d.db"
    async with serve(AGENTS, store=store) as s, s.client() as c:
        cases = [
            ({"type": "image", "data": b64(b"MZ\x90\x00" + bytes(300)), "name": "photo.jpg"}, 415),
            ({"type": "image", "data": b64(png(200, 200)[:90])}, 415),
            ({"type": "image", "data": b64(bomb_png())}, 413),
            ({"type": "file", "data": "not base64!!"}, 422),
        ]
        for part, status in cases:
            r = await c.post("/v1/threads/t9/inputs", json={"content": "x", "parts": [part]})
            assert r.status_code == status, (part, r.text)
        assert (await c.get("/v1/threads/t9")).status_code == 404
        big = {"content": "x", "parts": [{"type": "file", "data": b64(bytes(2 * 1024 * 1024))}]}
        assert (await c.post("/v1/threads/t9/inputs", json=big)).status_code == 413
    import apsw

    conn = apsw.Connection(f"{tmp_path}/d.db")
    assert conn.execute("SELECT count(*) FROM blobs").fetchone() == (0,)
    conn.close()


def vision_agents() -> list[Agent]:
    def script(request: ModelRequest) -> ModelReply:
        last = request.messages[-1]
        facts = ", ".join(f"{p.kind} {p.media_type} {p.width}x{p.height} {p.text}" for p in last.parts)
        return ModelReply(text=f"saw: {facts}")

    return [Agent(name="assistant", model=ScriptedModel(script))]


async def test_the_openai_client_sends_images_and_files_to_both_apis(tmp_path: Path) -> None:
    import openai

    uri = "data:image/png;base64," + b64(png(50, 20))
    pdf_uri = "data:application/pdf;base64," + b64(pdf("No 4711"))
    async with serve(vision_agents(), store=f"sqlite:///{tmp_path}/d.db") as s:
        c = openai.AsyncOpenAI(base_url=s.url + "/v1", api_key=s.key_a, max_retries=0)
        chat = await c.chat.completions.create(
            model="assistant",
            user="u1",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "what is it?"},
                        {"type": "image_url", "image_url": {"url": uri, "detail": "low"}},
                        {"type": "file", "file": {"file_data": pdf_uri, "filename": "i.pdf"}},
                    ],
                }
            ],
        )
        assert chat.choices[0].message.content == (
            "saw: image image/png 50x20 None, file application/pdf 0x0 No 4711"
        )
        reply = await c.responses.create(
            model="assistant",
            input=[
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "and this?"},
                        {"type": "input_image", "image_url": uri, "detail": "auto"},
                    ],
                }
            ],
        )
        assert reply.output_text == "saw: image image/png 50x20 None"
    import apsw

    conn = apsw.Connection(f"{tmp_path}/d.db")
    assert conn.execute("SELECT count(*) FROM blobs").fetchone() == (2,)  # the PNG once, the PDF
    conn.close()
