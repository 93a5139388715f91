"""A thread's images and files on the dashboard: thumbnails and links on its timeline,
their bytes at ``/ui/threads/{id}/blobs/{ref}`` with a safe type and disposition, kept
to the viewer's tenant and to the thread that refers to them."""

from __future__ import annotations

import base64
import html
import re

from tests.media_samples import pdf, png
from tests.server.dashboard_support import ADMIN, Flaky, dashboard, settle
from tests.server.test_dashboard import login


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_parts_show_as_a_bounded_thumbnail_and_a_link_served_safely_to_their_tenant_only() -> None:
    async with dashboard(Flaky()) as s:
        body = {
            "content": "my parcel",
            "parts": [
                {"type": "image", "data": b64(png(600, 300)), "name": "parcel.png", "text": "a <red> box"},
                {"type": "file", "data": b64(pdf("No 4711")), "name": "invoice.pdf"},
            ],
        }
        async with s.client() as api:
            assert (await api.post("/v1/threads/t1/inputs", json=body)).status_code == 202
            assert (await api.post("/v1/threads/t2/inputs", json={"content": "plain"})).status_code == 202
        acme = (await s.runtime.store.tenant("acme")).id
        await settle(s, f"{acme}/t1", want="active")
        await settle(s, f"{acme}/t2", want="active")
        async with login(s, s.key_a) as c:
            page = await c.get("/ui/thread", params={"id": "t1"})
            assert page.status_code == 200
            img = re.search(r"<img ([^>]+)>", page.text)
            assert img, page.text
            attrs = dict(re.findall(r'(\w+)="([^"]*)"', img.group(1)))
            assert (attrs["width"], attrs["height"], attrs["loading"]) == ("240", "120", "lazy")
            assert html.unescape(attrs["alt"]) == "a <red> box" and "<red>" not in page.text
            link = re.search(r'<a href="([^"]+)" download="invoice.pdf">invoice.pdf</a>', page.text)
            assert link and "application/pdf" in page.text
            image_url, pdf_url = html.unescape(attrs["src"]), html.unescape(link.group(1))

            r = await c.get(image_url)
            assert r.status_code == 200 and r.content == png(600, 300)
            assert r.headers["content-type"] == "image/png"
            assert r.headers["x-content-type-options"] == "nosniff"
            assert r.headers["content-disposition"] == "inline"
            assert "private" in r.headers["cache-control"]
            r = await c.get(pdf_url)
            assert r.status_code == 200 and r.content == pdf("No 4711")
            assert r.headers["content-type"] == "application/pdf"
            assert r.headers["content-disposition"].startswith("attachment")
            assert r.headers["x-content-type-options"] == "nosniff"

            ref = image_url.rsplit("/", 1)[1]
            assert (await c.get(f"/ui/threads/t2/blobs/{ref}")).status_code == 404  # not t2's
            assert (await c.get("/ui/threads/t1/blobs/sha256:" + "0" * 64)).status_code == 404
            assert (await c.get("/ui/threads/t1/blobs/../etc")).status_code == 404
        async with login(s, s.key_b) as other:  # another tenant: neither by its id nor the stored one
            assert (await other.get(image_url)).status_code == 404
            assert (await other.get(f"/ui/threads/{acme}/t1/blobs/{ref}")).status_code == 404
        async with login(s, ADMIN) as op:  # the operator links by the stored id
            page = await op.get("/ui/thread", params={"id": f"{acme}/t1"})
            src = html.unescape(re.search(r'<img [^>]*src="([^"]+)"', page.text).group(1))  # type: ignore[union-attr]
            assert src.startswith(f"/ui/threads/{acme}/t1/blobs/")
            assert (await op.get(src)).content == png(600, 300)
        async with s.client() as anon:
            r = await anon.get(image_url)
            assert r.status_code in (303, 401, 404) and r.content != png(600, 300)
