"""OCR through the REST API (real Tesseract): an image part sent as JSON or uploaded as
multipart/form-data without text gets the text read in it; one with text keeps it."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import httpx
import openai

from dormant.agent import Agent
from dormant.models import ModelReply, ScriptedModel, echo_model
from dormant.models.base import ModelRequest
from tests.helpers import eventually
from tests.ocr_samples import require_tesseract, text_png
from tests.server.support import serve

AGENTS = [Agent(name="assistant", model=echo_model())]


async def first_parts(c: httpx.AsyncClient, thread: str) -> list[dict[str, Any]]:
    async def replied() -> bool:
        r = await c.get(f"/v1/threads/{thread}/messages")
        return len(r.json()["items"]) >= 2

    await eventually(replied)
    parts: list[dict[str, Any]] = (await c.get(f"/v1/threads/{thread}/messages")).json()["items"][0]["parts"]
    return parts


async def test_json_and_multipart_images_get_their_text_read(tmp_path: Path) -> None:
    require_tesseract("eng", "chi_sim")
    photo = text_png(["INVOICE INV-48213"])
    async with serve(AGENTS, store=f"sqlite:///{tmp_path}/d.db", ocr=True) as s, s.client() as c:
        body = {
            "content": "two photos",
            "parts": [
                {"type": "image", "data": base64.b64encode(photo).decode(), "name": "a.png"},
                {"type": "image", "data": base64.b64encode(photo).decode(), "name": "b.png", "text": "mine"},
            ],
        }
        assert (await c.post("/v1/threads/t1/inputs", json=body)).status_code == 202
        read, given = await first_parts(c, "t1")
        assert "INV-48213" in read["text"] and given["text"] == "mine"
        r = await c.post("/v1/threads/t2/inputs", files=[("image", ("c.png", photo, "image/png"))])
        assert r.status_code == 202, r.text
        (uploaded,) = await first_parts(c, "t2")
        assert "INV-48213" in uploaded["text"]


async def test_an_openai_image_url_part_gets_its_text_read(tmp_path: Path) -> None:
    require_tesseract("eng", "chi_sim")
    seen: list[ModelRequest] = []

    def script(req: ModelRequest) -> ModelReply:
        seen.append(req)
        return ModelReply(text="ok")

    agents = [Agent(name="assistant", model=ScriptedModel(script))]
    data = base64.b64encode(text_png(["INVOICE INV-48213"])).decode()
    async with serve(agents, store=f"sqlite:///{tmp_path}/d.db", ocr=True) as s:
        client = openai.AsyncOpenAI(base_url=s.url + "/v1", api_key=s.key_a, max_retries=0)
        content = [
            {"type": "text", "text": "my invoice"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}},
        ]
        r = await client.chat.completions.create(
            model="assistant",
            messages=[{"role": "user", "content": content}],  # type: ignore[list-item,misc]
        )
        assert r.choices[0].message.content == "ok"
    (part,) = [p for m in seen[-1].messages for p in m.parts]
    assert "INV-48213" in (part.text or "")
