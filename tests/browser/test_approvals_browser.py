"""Approvals in a real browser (headless Debian Chromium, Playwright): approve one call,
deny one with a reason, answer a question, and see the model's result arrive in each
thread's timeline; tool arguments holding ``<script>`` shown as text; a tenant's key
cannot decide another tenant's approval. Screenshots in ``.artifacts/dashboard/``."""

from __future__ import annotations

import re

from playwright.async_api import Browser, expect

from tests.browser.test_dashboard_browser import browser, logged_in, shot
from tests.helpers import eventually
from tests.server.dashboard_support import PAID, waiting_dashboard
from tests.server.support import Served

__all__ = ["browser"]  # the fixture


async def send(s: Served, thread: str, text: str) -> None:
    async with s.client() as api:
        assert (await api.post(f"/v1/threads/{thread}/inputs", json={"content": text})).status_code == 202


async def test_approve_deny_and_answer_in_the_browser(browser: Browser) -> None:
    PAID.clear()
    errors: list[str] = []
    async with waiting_dashboard() as s:
        await send(s, "t1", "pay 5 <script>alert(1)</script>")
        await send(s, "t2", "pay 9 food")
        await send(s, "q1", "ask")

        async def three() -> bool:
            return len((await s.runtime.pending()).items) == 3

        await eventually(three)

        other = await logged_in(browser, s, s.key_b, errors)
        await other.goto(f"{s.url}/ui/approvals")
        await expect(other.locator("#waits .wait")).to_have_count(0)
        csrf = await other.locator("input[name=csrf]").first.get_attribute("value")
        acme = (await s.runtime.store.tenant("acme")).id
        call = (await s.runtime.pending()).items[0].call_id
        for thread in ("t1", f"{acme}/t1"):
            refused = await other.request.post(
                f"{s.url}/ui/approvals/decide",
                form={"csrf": csrf or "", "thread": thread, "call": call, "action": "approve"},
                headers={"Origin": s.url},
            )
            assert refused.status == 404
        assert len((await s.runtime.pending()).items) == 3  # nothing decided

        page = await logged_in(browser, s, s.key_a, errors)
        await page.goto(f"{s.url}/ui/approvals")
        await expect(page.locator("#waits .wait")).to_have_count(3)
        t1 = page.locator("#waits li", has=page.locator("a", has_text=re.compile("^t1$")))
        await expect(t1.locator("pre.args")).to_contain_text("<script>alert(1)</script>")
        assert await page.locator("#waits script").count() == 0
        await shot(page, "approvals")
        await t1.locator("form.approve button").click()
        await expect(page).to_have_url(f"{s.url}/ui/approvals")
        await expect(page.locator("#waits .wait")).to_have_count(2)

        await page.goto(f"{s.url}/ui/thread?id=t1")
        await expect(page.locator("#timeline .item-reply pre").first).to_have_text(
            "tool said: paid 5", timeout=10_000
        )
        await expect(page.locator("#timeline .item-approval .status")).to_have_text("approved")
        assert PAID == [5]

        await page.goto(f"{s.url}/ui/thread?id=t2")
        await page.fill("#timeline form.deny input[name=note]", "not today")
        await page.click("#timeline form.deny button")
        await expect(page.locator("#timeline .item-reply pre").first).to_contain_text(
            "not today", timeout=10_000
        )
        await expect(page.locator("#timeline .decision-note")).to_have_text("not today")
        await shot(page, "thread-denied")

        await page.goto(f"{s.url}/ui/thread?id=q1")
        await expect(page.locator("#thread-head")).to_contain_text("Waiting on a person")
        await page.click("#timeline button.choice:text('blue')")
        await expect(page.locator("#timeline .item-reply pre").first).to_have_text(
            "tool said: blue", timeout=10_000
        )
        await expect(page.locator("#timeline .answer")).to_have_text("blue")
        await page.goto(f"{s.url}/ui/overview")
        await expect(page.locator("#approvals-open")).to_have_text("0")
        assert PAID == [5]
        assert errors == []
