"""The dashboard in a real browser (headless Debian Chromium driven by Playwright) against
a live server on loopback with a scripted model: log in, the overview's charts, a reply
arriving live, paging 2,000 threads, an injected ``<script>`` shown as text, retry of a
failed thread, a tenant's key never showing another tenant's threads; no console error
on any page. Screenshots go to ``.artifacts/dashboard/`` (not committed); the time to
first render of the overview and of a thread's newest page is printed, not asserted."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, ConsoleMessage, Page, async_playwright, expect

from dormant.records import NewInput
from tests.browser.chromium import chromium
from tests.server.dashboard_support import ADMIN, Flaky, dashboard, settle
from tests.server.support import Served

SHOTS = Path(__file__).resolve().parents[2] / ".artifacts" / "dashboard"


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    path = chromium()
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=path, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield b
        finally:
            await b.close()


async def logged_in(browser: Browser, s: Served, token: str, errors: list[str]) -> Page:
    page = await (await browser.new_context()).new_page()

    def on_console(msg: ConsoleMessage) -> None:
        if msg.type == "error":
            errors.append(msg.text)

    page.on("console", on_console)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(f"{s.url}/ui/overview")
    await expect(page).to_have_url(f"{s.url}/ui/login")
    await page.fill("input[name=token]", token)
    await page.click("button[type=submit]")
    await expect(page).to_have_url(f"{s.url}/ui/overview")
    return page


async def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


async def test_operator_sees_charts_a_live_reply_escaped_text_and_retries_a_failed_thread(
    browser: Browser,
) -> None:
    flaky = Flaky()
    errors: list[str] = []
    async with dashboard(flaky) as s:
        acme = (await s.runtime.store.tenant("acme")).id
        page = await logged_in(browser, s, ADMIN, errors)
        began = time.perf_counter()
        await page.goto(f"{s.url}/ui/overview")
        await expect(page.locator("figure[data-chart=rss] svg path")).to_have_count(1)
        print(f"overview: charts drawn {1000 * (time.perf_counter() - began):.0f} ms after navigation")
        await expect(page.locator("figure[data-chart=backlog] svg path")).to_have_count(3)
        await shot(page, "overview")

        # a thread appears, and its reply arrives live on its open page
        async with s.client() as api:
            await s.runtime.store.create_thread(f"{acme}/live", "assistant", tenant=acme)
            await page.goto(f"{s.url}/ui/thread?id={acme}/live")
            await expect(page.locator("#timeline")).to_contain_text("No messages yet")
            r = await api.post("/v1/threads/live/inputs", json={"content": "<script>alert(1)</script>"})
            assert r.status_code == 202
        await expect(page.locator("#timeline .item-reply pre")).to_have_text(
            "echo: <script>alert(1)</script>", timeout=10_000
        )
        await expect(page.locator("#timeline .item-input pre")).to_have_text("<script>alert(1)</script>")
        assert await page.locator("#timeline script").count() == 0
        await shot(page, "thread")

        # a failed thread, retried from its page
        async with s.client() as api:
            await api.post("/v1/threads/bad/inputs", json={"content": "boom"})
        await settle(s, f"{acme}/bad", want="failed")
        await page.goto(f"{s.url}/ui/failures")
        await expect(page.locator("#failed")).to_contain_text("the model broke on purpose")
        await shot(page, "failures")
        await page.click(f"#failed a:text('{acme}/bad')")
        await expect(page.locator("#retry")).to_be_visible()
        flaky.failing = False
        await page.click("#retry")
        await expect(page.locator("#timeline .item-reply pre")).to_have_text("echo: boom", timeout=10_000)
        await expect(page.locator("#retry")).to_have_count(0)
        await page.goto(f"{s.url}/ui/tenants")
        await expect(page.locator("#tenants")).to_contain_text("bravo")
        await shot(page, "tenants")
        assert errors == []


async def test_paging_2000_threads_and_a_tenant_sees_only_its_own(browser: Browser) -> None:
    errors: list[str] = []
    async with dashboard(Flaky()) as s:
        store = s.runtime.store
        acme = (await store.tenant("acme")).id
        bravo = (await store.tenant("bravo")).id
        for n in range(2000):
            await store.create_thread(f"{acme}/a{n:04d}", "assistant", tenant=acme)
        await store.create_thread(f"{bravo}/b-only", "assistant", tenant=bravo)
        big = f"{acme}/a0000"  # a long thread, 10,000 messages and more: its newest page is shown first
        inputs = [
            NewInput(thread_id=big, kind="user", dedup_key=f"k{n}", content=f"m{n}", agent="assistant")
            for n in range(10_000)
        ]
        for at in range(0, len(inputs), 500):
            await s.runtime.admit(inputs[at : at + 500], tenant=acme)
        async with asyncio.timeout(30):
            while (await store.get_thread(big)).last_seq < 10_000:  # noqa: ASYNC110
                await asyncio.sleep(0.1)

        page = await logged_in(browser, s, s.key_a, errors)
        await page.goto(f"{s.url}/ui/threads")
        rows = page.locator("#threads tbody tr")
        await expect(rows).to_have_count(50)
        await expect(rows.first).to_contain_text("a0000")
        for _ in range(39):
            await page.click("a[rel=next]")
        await expect(rows.first).to_contain_text("a1950")
        await expect(page.locator("a[rel=next]")).to_have_count(0)
        await shot(page, "threads")
        assert "b-only" not in await page.content()
        began = time.perf_counter()
        await page.goto(f"{s.url}/ui/thread?id={big}")
        await expect(page.locator("#timeline li").first).to_be_visible()
        ms = 1000 * (time.perf_counter() - began)
        print(f"thread of 10,000+ messages, newest page: first render {ms:.0f} ms")
        assert (
            len(set(await page.locator("#timeline li").evaluate_all("els => els.map(e => e.dataset.seq)")))
            == 50
        )
        await expect(page.locator("#timeline li").first).to_contain_text("m9999")
        await page.click("a[rel=next]")
        await expect(page.locator("#timeline li").first).not_to_contain_text("m9999")

        # search memory by an identity part, open the subject, then a record's history
        memory = await s.runtime.memory.for_tenant(acme)
        key = await memory.bind({"email": "ann@example.com"})
        await memory.add(key, "ann likes <i>tea</i>")
        await page.goto(f"{s.url}/ui/memory")
        await page.fill("#find-keys input[name=part]", "email")
        await page.fill("#find-keys input[name=value]", "ann@example.com")
        await page.click("#find-keys button")
        await page.click(f"#keys a:text('{key}')")
        await expect(page.locator("#records")).to_contain_text("ann likes <i>tea</i>")
        await page.click("#records tbody a")
        await expect(page.locator("#history")).to_contain_text("add")
        await shot(page, "memory")

        other = await logged_in(browser, s, s.key_b, errors)
        await other.goto(f"{s.url}/ui/threads")
        await expect(other.locator("#threads tbody tr")).to_have_count(1)
        await expect(other.locator("#threads")).to_contain_text("b-only")
        assert "a0000" not in await other.content()
        response = await other.goto(f"{s.url}/ui/thread?id={big}")
        assert response is not None and response.status in (404, 422)
        await expect(other.locator("body")).not_to_contain_text("m0")
        # the overview of a tenant has no process-wide charts
        await other.goto(f"{s.url}/ui/overview")
        await expect(other.locator("#charts")).to_have_count(0)
        # a 404/422 page logs a console error for the failed navigation; nothing else may
        assert [e for e in errors if "status of 4" not in e] == []
