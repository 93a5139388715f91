"""Images and files through the REST API: JSON parts, refusals (413, 415, 422) with nothing
written, the parts' facts in /messages and their bytes at /blobs, tenant-scoped."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import httpx

from dormant.agent import Agent
from dormant.models import echo_model
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
