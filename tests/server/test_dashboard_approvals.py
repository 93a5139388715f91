"""The dashboard's Approvals page and decisions over HTTP: listed escaped and tenant-scoped,
decided once per form key (a conflicting decision shows the first), CSRF-checked,
audited, an edit's 422 shown; questions answered; the overview's count; the thread
list's "person" state."""

from __future__ import annotations

import logging
import re

import httpx
import pytest

from dormant.server.ui.waits import who
from dormant.tenants.keys import parse_key
from tests.helpers import eventually
from tests.server.dashboard_support import ADMIN, PAID, waiting_dashboard
from tests.server.support import Served
from tests.server.test_dashboard import csrf_of, login


async def send(s: Served, thread: str, text: str, key: str | None = None) -> None:
    async with s.client(key) as api:
        r = await api.post(f"/v1/threads/{thread}/inputs", json={"content": text})
        assert r.status_code == 202, r.text


async def open_waits(s: Served, n: int) -> None:
    async def there() -> bool:
        return len((await s.runtime.pending()).items) == n

    await eventually(there)


def form(html: str, action: str, call: str) -> dict[str, str]:
    """The hidden fields of the ``action`` form (approve, deny, edit, answer) of wait ``call``."""
    for match in re.finditer(r"<form [^>]*class=\"(\w+)[^\"]*\"[^>]*>(.*?)</form>", html, re.S):
        if match.group(1) == action and f'name="call" value="{call}' in match.group(2):
            return dict(re.findall(r'type="hidden" name="(\w+)" value="([^"]*)"', match.group(2)))
    raise AssertionError(f"no {action} form for {call}")


async def reply_of(c: httpx.AsyncClient, thread: str, text: str) -> str:
    async def shown() -> bool:
        return text in (await c.get("/ui/thread", params={"id": thread})).text

    await eventually(shown)
    return (await c.get("/ui/thread", params={"id": thread})).text


async def test_approve_once_per_form_key_and_a_conflict_shows_the_first(
    caplog: pytest.LogCaptureFixture,
) -> None:
    PAID.clear()
    async with waiting_dashboard() as s:
        await send(s, "t1", "pay 5 <script>alert(1)</script>")
        await open_waits(s, 1)
        async with login(s, s.key_a) as a, login(s, s.key_b) as b:
            listing = await a.get("/ui/approvals")
            assert listing.status_code == 200 and "pay" in listing.text
            assert (
                "&lt;script&gt;alert(1)&lt;/script&gt;" in listing.text
                and "<script>alert" not in listing.text
            )
            fields = form(listing.text, "approve", "p")
            assert (await b.get("/ui/approvals")).text.count('class="approve') == 0
            # tenant B cannot decide A's call, whichever id it names
            b_csrf = csrf_of((await b.get("/ui/approvals")).text)
            for thread in ("t1", fields["thread"]):
                other = await b.post(
                    "/ui/approvals/decide", data={**fields, "thread": thread, "csrf": b_csrf}
                )
                assert other.status_code == 404
            assert (await a.post("/ui/approvals/decide", data={**fields, "csrf": ""})).status_code == 403
            assert (await s.runtime.pending()).items  # nothing decided
            with caplog.at_level(logging.INFO, logger="dormant.server.ui"):
                ok = await a.post("/ui/approvals/decide", data=fields)
                again = await a.post("/ui/approvals/decide", data=fields)  # a double submit
            assert ok.status_code == again.status_code == 303
            audits = [r for r in caplog.records if r.getMessage() == "ui_action"]
            assert audits and audits[0].__dict__["decision"] == "approve"
            page = await reply_of(a, "t1", "tool said: paid 5")
            assert PAID == [5]
            acme = (await s.runtime.store.tenant("acme")).id
            assert "approved" in page and f"tenant:{acme} key:{parse_key(s.key_a)[0]}" in page
            # a deny from a form rendered before the approval: the first decision is shown
            deny = {**form(listing.text, "deny", "p"), "note": "too much"}
            conflict = await a.post("/ui/approvals/decide", data=deny)
            assert conflict.status_code == 409 and 'id="first-decision"' in conflict.text
            assert "approved" in conflict.text


async def test_deny_with_a_reason_and_edits_checked_with_the_422_message_shown() -> None:
    PAID.clear()
    async with waiting_dashboard() as s:
        await send(s, "t1", "pay 7 rent")
        await send(s, "t2", "pay 9 food")
        await open_waits(s, 2)
        async with login(s, ADMIN) as op:
            acme = (await s.runtime.store.tenant("acme")).id
            listing = (await op.get("/ui/approvals", params={"thread": f"{acme}/t1"})).text
            assert f"{acme}/t2" not in listing
            assert (await op.get("/ui/approvals", params={"tool": "nope"})).text.count('class="approve') == 0
            assert (await op.get("/ui/approvals", params={"age": "1d"})).text.count('class="approve') == 0
            deny = {**form(listing, "deny", "p"), "note": "not this month"}
            assert (await op.post("/ui/approvals/decide", data=deny)).status_code == 303
            page = await reply_of(op, f"{acme}/t1", "not this month. It did not run")
            assert "denied by operator" in page
            thread = (await op.get("/ui/thread", params={"id": f"{acme}/t2"})).text
            edit = form(thread, "edit", "p")
            bad = await op.post("/ui/approvals/decide", data={**edit, "args": "{nope"})
            assert bad.status_code == 422 and "not JSON" in bad.text
            broken = await op.post("/ui/approvals/decide", data={**edit, "args": '{"amount": "many"}'})
            assert broken.status_code == 422 and "schema" in broken.text
            good = await op.post(
                "/ui/approvals/decide", data={**edit, "args": '{"amount": 3, "memo": "less"}'}
            )
            assert good.status_code == 303 and good.headers["location"].startswith("/ui/thread?")
            page = await reply_of(op, f"{acme}/t2", "tool said: paid 3")
            assert PAID == [3] and "edited" in page


async def test_questions_answered_counts_on_the_overview_and_the_person_filter() -> None:
    async with waiting_dashboard() as s:
        await send(s, "q1", "ask")
        await send(s, "q2", "ask free")
        await send(s, "calm", "hello")
        await open_waits(s, 2)
        async with login(s, s.key_a) as a:
            overview = (await a.get("/ui/overview")).text
            assert re.search(r'id="approvals-open">2<', overview)
            waiting = (await a.get("/ui/threads", params={"state": "person"})).text
            assert "q1" in waiting and "q2" in waiting and ">calm<" not in waiting
            thread = (await a.get("/ui/thread", params={"id": "q1"})).text
            assert "which colour?" in thread and 'value="red"' in thread and "Waiting on a person" in thread
            assert (await a.get("/ui/api/thread", params={"id": "q1"})).json()["state"] == "person"
            fields = form(thread, "answer", "q")
            wrong = await a.post("/ui/approvals/answer", data={**fields, "text": "green"})
            assert wrong.status_code == 422 and "one of" in wrong.text
            assert (await a.post("/ui/approvals/answer", data={**fields, "text": "blue"})).status_code == 303
            await reply_of(a, "q1", "tool said: blue")
            free = form((await a.get("/ui/thread", params={"id": "q2"})).text, "answer", "q")
            assert (await a.post("/ui/approvals/answer", data={**free, "text": "teal"})).status_code == 303
            await reply_of(a, "q2", "tool said: teal")
            assert re.search(r'id="approvals-open">0<', (await a.get("/ui/overview")).text)
        async with login(s, ADMIN) as op:
            sample = (await op.get("/ui/api/samples")).json()["samples"][-1]
            assert {"approvals_open", "approvals_oldest_s"} <= set(sample)


def test_decisions_name_the_viewer() -> None:
    from dormant.server.ui.auth import Viewer

    assert who(Viewer(tenant=None, nonce="n", expires=0)) == "operator"
    assert who(Viewer(tenant="t9", nonce="n", expires=0)) == "tenant:t9"
    assert who(Viewer(tenant="t9", nonce="n", expires=0, key="k1")) == "tenant:t9 key:k1"
