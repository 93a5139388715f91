"""The dashboard's routes over HTTP: login and sessions, CSRF, the CSP, tenants kept apart,
escaping, paging."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from dormant.server.ui.auth import Sessions
from tests.server.dashboard_support import ADMIN, Flaky, dashboard, settle
from tests.server.support import Served


@asynccontextmanager
async def login(s: Served, token: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client logged in to the dashboard with ``token``."""
    async with httpx.AsyncClient(base_url=s.url, timeout=30) as c:
        r = await c.post("/ui/login", data={"token": token})
        assert r.status_code == 303, r.text
        yield c


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match
    return match.group(1)


async def test_login_sets_a_strict_httponly_session_and_every_page_a_strict_csp() -> None:
    async with dashboard(Flaky()) as s, httpx.AsyncClient(base_url=s.url) as anon:
        r = await anon.get("/ui/overview")
        assert r.status_code == 303 and r.headers["location"] == "/ui/login"
        bad = await anon.post("/ui/login", data={"token": "nope"})
        assert bad.status_code == 401 and "not valid" in bad.text and "set-cookie" not in bad.headers
        r = await anon.post("/ui/login", data={"token": ADMIN})
        cookie = r.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui" in cookie
        anon.cookies.set("dormant_ui", r.cookies["dormant_ui"])
        page = await anon.get("/ui/overview")
        assert page.status_code == 200 and "every tenant" in page.text
        csp = page.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "script-src 'self'" in csp and "unsafe" not in csp
        assert "<script>" not in page.text and 'src="/ui/static/dashboard.js"' in page.text
        js = await anon.get("/ui/static/dashboard.js")
        assert js.status_code == 200 and "http" not in js.text.replace("http://www.w3.org/2000/svg", "")
        # a forged or tampered cookie is no session
        anon.cookies.set("dormant_ui", r.cookies["dormant_ui"][:-2] + "xx")
        assert (await anon.get("/ui/threads")).status_code == 303


async def test_the_overview_samples_are_the_operators_only() -> None:
    async with dashboard(Flaky()) as s, login(s, ADMIN) as op, login(s, s.key_a) as tenant:
        body = (await op.get("/ui/api/samples")).json()
        assert body["samples"] and {"rss", "soft", "level", "backlog", "cache_bytes"} <= set(
            body["samples"][0]
        )
        later = (await op.get("/ui/api/samples", params={"since": body["samples"][-1]["t"]})).json()
        assert all(x["t"] > body["samples"][-1]["t"] for x in later["samples"])
        assert (await tenant.get("/ui/api/samples")).status_code == 404


async def test_retry_needs_the_sessions_csrf_token_and_a_same_site_origin() -> None:
    flaky = Flaky()
    async with dashboard(flaky) as s:
        async with s.client() as api:
            assert (await api.post("/v1/threads/t1/inputs", json={"content": "boom"})).status_code == 202
        stored = f"{(await s.runtime.store.tenant('acme')).id}/t1"
        await settle(s, stored, want="failed")
        async with login(s, s.key_a) as c:
            page = await c.get("/ui/thread", params={"id": "t1"})
            assert page.status_code == 200 and 'id="retry"' in page.text
            token = csrf_of(page.text)
            flaky.failing = False
            refused = await c.post("/ui/thread/retry", data={"id": "t1"})
            assert refused.status_code == 403 and "CSRF" in refused.text
            forged = await c.post("/ui/thread/retry", data={"id": "t1", "csrf": Sessions().csrf_ok.__name__})
            assert forged.status_code == 403
            cross = await c.post(
                "/ui/thread/retry",
                data={"id": "t1", "csrf": token},
                headers={"Origin": "https://evil.example"},
            )
            assert cross.status_code == 403
            assert (await s.runtime.store.get_thread(stored)).status == "failed"  # nothing done
            ok = await c.post("/ui/thread/retry", data={"id": "t1", "csrf": token})
            assert ok.status_code == 303
            await settle(s, stored, want="active")
            page = await c.get("/ui/thread", params={"id": "t1"})
            assert "echo: boom" in page.text


async def test_a_tenant_never_sees_another_tenants_threads_and_text_is_escaped() -> None:
    async with dashboard(Flaky()) as s:
        async with s.client() as api:
            r = await api.post("/v1/threads/secret-a/inputs", json={"content": "<script>alert(1)</script>"})
            assert r.status_code == 202
        a_id = f"{(await s.runtime.store.tenant('acme')).id}/secret-a"
        await settle(s, a_id, want="active")
        async with login(s, s.key_b) as b, login(s, ADMIN) as op:
            listing = await b.get("/ui/threads")
            assert listing.status_code == 200 and "secret-a" not in listing.text
            for probe in (a_id, "secret-a", f"../{a_id}"):
                seen = await b.get("/ui/thread", params={"id": probe})
                assert seen.status_code in (404, 422) and "alert(1)" not in seen.text
                assert (await b.get("/ui/api/thread", params={"id": a_id})).status_code in (404, 422)
            mine = await op.get("/ui/thread", params={"id": a_id})
            assert mine.status_code == 200
            assert "&lt;script&gt;alert(1)&lt;/script&gt;" in mine.text and "<script>alert" not in mine.text
            assert "secret-a" in (await op.get("/ui/threads")).text


async def test_threads_are_paged_and_filtered_within_bounds() -> None:
    async with dashboard(Flaky()) as s:
        acme = await s.runtime.store.tenant("acme")
        for n in range(120):
            await s.runtime.store.create_thread(f"{acme.id}/p{n:03d}", "assistant", tenant=acme.id)
        async with login(s, s.key_a) as c:
            first = await c.get("/ui/threads")
            ids = re.findall(r">(p\d{3})</a>", first.text)
            assert ids == [f"p{n:03d}" for n in range(50)]
            nxt = re.search(r'href="([^"]+)" rel="next"', first.text)
            assert nxt
            second = await c.get(nxt.group(1).replace("&amp;", "&"))
            assert re.findall(r">(p\d{3})</a>", second.text)[0] == "p050"
            failed = await c.get("/ui/threads", params={"state": "failed"})
            assert "No threads match" in failed.text and "Read 120 threads" in failed.text
            idle = await c.get("/ui/threads", params={"state": "idle", "active": "1h"})
            assert len(re.findall(r">(p\d{3})</a>", idle.text)) == 50
            assert (await c.get("/ui/threads", params={"state": "<b>"})).status_code == 200


async def test_the_operator_manages_tenants_and_keys_and_a_tenant_cannot() -> None:
    async with dashboard(Flaky()) as s:
        async with login(s, ADMIN) as op, login(s, s.key_a) as a:
            assert (await a.get("/ui/tenants")).status_code == 404
            page = await op.get("/ui/tenants")
            assert "acme" in page.text and "bravo" in page.text
            token = csrf_of(page.text)
            assert (await op.post("/ui/tenants", data={"name": "carol"})).status_code == 403
            made = await op.post("/ui/tenants", data={"name": "carol", "csrf": token})
            assert made.status_code == 303
            carol = await s.runtime.store.tenant("carol")
            key_page = await op.post("/ui/tenants/keys", data={"tenant": carol.id, "csrf": token})
            secret = re.search(r'<pre id="secret">([^<]+)</pre>', key_page.text)
            assert key_page.status_code == 200 and secret
            assert (await s.runtime.store.authenticate(secret.group(1))).id == carol.id
            keys = (await s.runtime.store.list_keys(carol.id)).items
            assert secret.group(1) not in (await op.get("/ui/tenants", params={"tenant": carol.id})).text
            revoked = await op.post("/ui/tenants/keys/revoke", data={"key": keys[0].id, "csrf": token})
            assert revoked.status_code == 303
            refused = await a.post("/ui/tenants/keys", data={"tenant": carol.id, "csrf": csrf_of(page.text)})
            assert refused.status_code == 403  # another session's token
        async with httpx.AsyncClient(base_url=s.url) as c:
            assert (await c.post("/ui/login", data={"token": secret.group(1)})).status_code == 401


async def test_memory_search_by_identity_part_a_records_history_and_tenants_apart() -> None:
    async with dashboard(Flaky()) as s:
        acme = await s.runtime.store.tenant("acme")
        memory = await s.runtime.memory.for_tenant(acme.id)
        key = await memory.bind({"phone": "+15550100"})
        added = await memory.add(key, "prefers <b>window</b> seats")
        async with login(s, s.key_a) as a, login(s, s.key_b) as b:
            found = await a.get("/ui/memory", params={"part": "phone", "value": "+15550100"})
            assert found.status_code == 200 and key in found.text
            shown = await a.get("/ui/memory", params={"key": key})
            assert "prefers &lt;b&gt;window&lt;/b&gt; seats" in shown.text
            history = await a.get("/ui/memory", params={"key": key, "record": added.record.id})
            assert history.status_code == 200 and 'id="history"' in history.text and "add" in history.text
            assert key not in (await b.get("/ui/memory", params={"part": "phone", "value": "+15550100"})).text
            assert "window" not in (await b.get("/ui/memory", params={"key": key})).text
            other = await b.get("/ui/memory", params={"key": key, "record": added.record.id})
            assert other.status_code == 404
            assert (await a.get("/ui/memory", params={"key": "not-a-key"})).status_code == 422


async def test_a_dead_lettered_call_is_marked_resolved_with_a_note_and_audited(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with dashboard(Flaky()) as s:
        async with s.client() as api:
            assert (await api.post("/v1/threads/t2/inputs", json={"content": "call"})).status_code == 202
        async with asyncio.timeout(10):
            while not (await s.runtime.store.list_outbox(status="dead")).items:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        (entry,) = (await s.runtime.store.list_outbox(status="dead")).items
        async with login(s, s.key_b) as b, login(s, s.key_a) as a:
            assert "broken" not in (await b.get("/ui/failures")).text
            page = await a.get("/ui/failures")
            assert "the tool broke on o1" in page.text and 'action="/ui/calls/resolve"' in page.text
            token = csrf_of(page.text)
            other = csrf_of((await b.get("/ui/failures")).text)
            assert (
                await b.post("/ui/calls/resolve", data={"entry": entry.id, "note": "x", "csrf": other})
            ).status_code == 404
            no_note = await a.post("/ui/calls/resolve", data={"entry": entry.id, "note": "  ", "csrf": token})
            assert no_note.status_code == 422
            assert (await s.runtime.store.list_outbox(status="dead")).items  # nothing done
            with caplog.at_level(logging.INFO, logger="dormant.server.ui"):
                ok = await a.post(
                    "/ui/calls/resolve", data={"entry": entry.id, "note": "refunded by hand", "csrf": token}
                )
            assert ok.status_code == 303
            assert not (await s.runtime.store.list_outbox(status="dead")).items
            (record,) = [r for r in caplog.records if r.getMessage() == "ui_action"]
            assert (
                record.__dict__["action"] == "resolve_call" and record.__dict__["note"] == "refunded by hand"
            )
            assert record.__dict__["tool"] == "broken" and record.__dict__["who"].startswith("tenant:")
            again = await a.post(
                "/ui/calls/resolve", data={"entry": entry.id, "note": "again", "csrf": token}
            )
            assert again.status_code == 404


async def test_a_threads_state_changes_are_shown_from_its_journal() -> None:
    async with dashboard(Flaky()) as s:
        acme = await s.runtime.store.tenant("acme")
        async with s.client() as api:
            created = await api.post(
                "/v1/threads", json={"id": "who", "identity": {"email": "x@example.com"}}
            )
            assert created.status_code == 201
            await api.post("/v1/threads/who/inputs", json={"content": "hi"})
        await settle(s, f"{acme.id}/who", want="active")
        async with login(s, s.key_a) as a:
            page = await a.get("/ui/thread", params={"id": "who"})
            assert page.status_code == 200 and 'id="journal"' in page.text
            rows = re.findall(r"<tr><td>(\d+)</td><td>(add|update|delete|full|incremental)</td>", page.text)
            assert rows, "the subject binding is a state change"
