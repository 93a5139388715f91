"""A thread's image and PDF on the dashboard in a real browser (headless Debian
Chromium, Playwright): the image's thumbnail loads under the page's CSP, the PDF is a
download link, and no console error. Screenshot in ``.artifacts/dashboard/``."""

from __future__ import annotations

import base64

from playwright.async_api import Browser, expect

from tests.browser.test_dashboard_browser import browser, logged_in, shot
from tests.media_samples import pdf, png
from tests.server.dashboard_support import Flaky, dashboard, settle

__all__ = ["browser"]  # the fixture


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_an_image_part_shows_as_a_loaded_thumbnail_and_a_pdf_as_a_link(browser: Browser) -> None:
    errors: list[str] = []
    async with dashboard(Flaky()) as s:
        body = {
            "content": "my parcel",
            "parts": [
                {"type": "image", "data": b64(png(480, 320)), "name": "parcel.png", "text": "a red box"},
                {"type": "file", "data": b64(pdf("No 4711")), "name": "invoice.pdf"},
            ],
        }
        async with s.client() as api:
            assert (await api.post("/v1/threads/p1/inputs", json=body)).status_code == 202
        await settle(s, f"{(await s.runtime.store.tenant('acme')).id}/p1", want="active")
        page = await logged_in(browser, s, s.key_a, errors)
        await page.goto(f"{s.url}/ui/thread?id=p1")
        img = page.locator("#timeline .item-input img[alt='a red box']")
        await expect(img).to_have_count(1)
        await img.scroll_into_view_if_needed()
        await expect(img).to_have_js_property("complete", True)
        assert await img.evaluate("i => i.naturalWidth") == 480
        box = await img.bounding_box()
        assert box and box["width"] <= 240 and box["height"] <= 240
        link = page.locator("#timeline .item-input a[download='invoice.pdf']")
        await expect(link).to_have_text("invoice.pdf")
        await expect(page.locator("#timeline .item-input .part-file")).to_contain_text("application/pdf")
        async with page.expect_download() as download:
            await link.click()
        assert (await download.value).suggested_filename == "invoice.pdf"
        await shot(page, "thread-parts")
        assert errors == []
