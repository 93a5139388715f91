"""The memory endpoints of ``dormant serve``: add, recall, history, bind, rebind, and
identity parts at admission; each tenant sees only its own memory."""

from __future__ import annotations

import json

from dormant.agent import Agent
from dormant.memory import HashingEmbedder
from dormant.models import ModelReply, ModelRequest, ScriptedModel, echo_model
from dormant.records import ToolCall
from dormant.subject import SubjectOptions
from tests.helpers import eventually
from tests.server.support import Served, serve

PHONE = {"phone": "+1 555 0100", "device": "ios-1"}


def agents() -> list[Agent]:
    return [Agent(name="assistant", model=echo_model(), subject=SubjectOptions())]


def hashing(s: Served) -> Served:
    s.runtime.memory_embedder = HashingEmbedder()  # no model download: memory is built on first use
    return s


async def test_add_recall_history_bind_and_rebind() -> None:
    async with serve(agents()) as s, hashing(s).client() as a:
        key = (await a.post("/v1/memory/bind", json={"identity": PHONE})).json()["key"]
        assert key.startswith("b2_")
        assert (await a.post("/v1/memory/bind", json={"identity": PHONE})).json()["key"] == key
        r = await a.post(
            "/v1/memory",
            json={"subject": key, "text": "prefers tea", "kind": "preference", "tags": {"key": "drink"}},
        )
        assert r.status_code == 201, r.text
        first = r.json()["record"]
        assert first["subject"] == key and first["kind"] == "preference" and first["tags"] == {"key": "drink"}
        r = await a.post(
            "/v1/memory", json={"identity": PHONE, "text": "prefers coffee", "replaces": [first["id"]]}
        )
        assert r.status_code == 201 and r.json()["superseded"] == [first["id"]]
        second = r.json()["record"]
        await a.post("/v1/memory", json={"subject": key, "text": "lives in Lisbon", "importance": 0.9})

        r = await a.post("/v1/memory/recall", json={"query": "coffee", "subjects": [key], "k": 2})
        assert r.status_code == 200, r.text
        items = r.json()["items"]
        assert items and items[0]["record"]["text"] == "prefers coffee" and len(items) <= 2
        by_identity = await a.post("/v1/memory/recall", json={"query": "Lisbon", "identity": PHONE})
        assert "lives in Lisbon" in [h["record"]["text"] for h in by_identity.json()["items"]]

        # the superseded record's history, paged
        path = f"/v1/memory/{first['id']}/history"
        page = (await a.get(path, params={"subject": key, "limit": 1})).json()
        assert len(page["items"]) == 1 and page["items"][0]["op"] == "add" and page["next_cursor"]
        rest = (await a.get(path, params={"subject": key, "cursor": page["next_cursor"]})).json()
        assert rest["items"] and rest["next_cursor"] is None

        # a new device: move the memories to the new key
        new = (await a.post("/v1/memory/bind", json={"identity": {**PHONE, "device": "android"}})).json()
        r = await a.post("/v1/memory/rebind", json={"old": key, "new": new["key"]})
        assert r.status_code == 200 and r.json()["changed"] >= 1
        moved = await a.post("/v1/memory/recall", json={"query": "coffee", "subjects": [new["key"]]})
        assert second["id"] in [h["record"]["id"] for h in moved.json()["items"]]


async def test_identity_at_admission_sets_the_threads_subject() -> None:
    async with serve(agents()) as s, hashing(s).client() as a:
        key = (await a.post("/v1/memory/bind", json={"identity": PHONE})).json()["key"]
        r = await a.post("/v1/threads/t1/inputs", json={"content": "hi", "identity": PHONE})
        assert r.status_code == 202, r.text
        tenant = await s.runtime.store.authenticate(s.key_a)

        async def subject_set() -> bool:
            return bool((await s.runtime.registers(f"{tenant.id}/t1"))["subject"] == key)

        await eventually(subject_set)
        bad = await a.post("/v1/threads/t1/inputs", json={"content": "x", "identity": {"Bad Name": "1"}})
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_input"


async def test_identity_at_thread_creation_journals_the_subject_at_once() -> None:
    async with serve(agents()) as s, hashing(s).client() as a:
        key = (await a.post("/v1/memory/bind", json={"identity": PHONE})).json()["key"]
        r = await a.post("/v1/threads", json={"id": "t2", "identity": PHONE})
        assert r.status_code in (200, 201), r.text
        tenant = await s.runtime.store.authenticate(s.key_a)
        # durable with the thread row, before any input or slice
        assert (await s.runtime.registers(f"{tenant.id}/t2"))["subject"] == key
        # creating it again (a retry) leaves it as it is, whatever identity comes along
        again = await a.post("/v1/threads", json={"id": "t2", "identity": {"phone": "+1 555 0199"}})
        assert again.status_code in (200, 201), again.text
        assert (await s.runtime.registers(f"{tenant.id}/t2"))["subject"] == key
        bad = await a.post("/v1/threads", json={"id": "t3", "identity": {"Bad Name": "1"}})
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_input"


async def test_second_tenant_gets_404_or_nothing_from_the_first_tenants_memory() -> None:
    async with serve(agents()) as s, hashing(s).client() as a, s.client(s.key_b) as b:
        key = (await a.post("/v1/memory/bind", json={"identity": PHONE})).json()["key"]
        record = (await a.post("/v1/memory", json={"subject": key, "text": "secret plan"})).json()["record"]
        await a.post("/v1/memory", json={"subject": key, "text": "secret plan B", "replaces": [record["id"]]})
        path = f"/v1/memory/{record['id']}/history"
        cursor = (await a.get(path, params={"subject": key, "limit": 1})).json()["next_cursor"]
        assert cursor

        for params in ({"subject": key}, {"subject": key, "cursor": cursor}, {"subject": key, "limit": 1}):
            r = await b.get(path, params=params)
            assert r.status_code == 404, (params, r.status_code, r.text)
            assert r.json()["error"]["code"] == "not_found" and "secret" not in r.text
        # the same identity binds to the same key in b, whose memory under it is its own: empty
        for body in ({"subjects": [key], "query": "secret"}, {"identity": PHONE, "query": "plan"}):
            r = await b.post("/v1/memory/recall", json=body)
            assert r.status_code == 200 and r.json()["items"] == [] and "secret" not in r.text
        # b moving "a's" key moves nothing of a's
        other = (await b.post("/v1/memory/bind", json={"identity": {"phone": "+1 555 0199"}})).json()["key"]
        r = await b.post("/v1/memory/rebind", json={"old": key, "new": other})
        assert r.status_code == 200 and r.json()["changed"] == 0
        still = await a.post("/v1/memory/recall", json={"subjects": [key], "query": "secret plan"})
        assert "secret plan B" in [h["record"]["text"] for h in still.json()["items"]]
        assert (await a.get(path, params={"subject": key})).status_code == 200


async def test_bad_memory_bodies_get_422() -> None:
    async with serve(agents()) as s, hashing(s).client() as a:
        key = (await a.post("/v1/memory/bind", json={"identity": PHONE})).json()["key"]
        bad: list[tuple[str, str, dict[str, object]]] = [
            ("POST", "/v1/memory", {"json": {"text": "x"}}),  # no subject
            ("POST", "/v1/memory", {"json": {"text": "x", "subject": key, "identity": PHONE}}),  # both
            ("POST", "/v1/memory", {"json": {"text": "", "subject": key}}),
            ("POST", "/v1/memory", {"json": {"text": "x", "subject": "nope"}}),
            ("POST", "/v1/memory", {"json": {"text": "x", "subject": key, "kind": "rumour"}}),
            ("POST", "/v1/memory", {"json": {"text": "x", "subject": key, "importance": 2}}),
            ("POST", "/v1/memory", {"json": {"text": "x", "subject": key, "tags": {"Bad Key": 1}}}),
            ("POST", "/v1/memory", {"json": {"text": "x", "subject": key, "typo": 1}}),
            ("POST", "/v1/memory/recall", {"json": {"query": "x"}}),
            ("POST", "/v1/memory/recall", {"json": {"subjects": [key], "k": 0}}),
            ("POST", "/v1/memory/recall", {"json": {"subjects": ["b1_xyz"]}}),
            ("POST", "/v1/memory/bind", {"json": {"identity": {}}}),
            ("POST", "/v1/memory/bind", {"json": {"identity": {"Phone Number": "1"}}}),
            ("POST", "/v1/memory/rebind", {"json": {"old": key, "new": key, "mode": "swap"}}),
            ("POST", "/v1/memory/rebind", {"json": {"old": key}}),
            ("GET", "/v1/memory/abc/history", {}),  # no subject
            ("GET", "/v1/memory/abc/history", {"params": {"subject": "nope"}}),
            ("GET", "/v1/memory/abc/history", {"params": {"subject": key, "cursor": "x"}}),
        ]
        for method, path, kwargs in bad:
            r = await a.request(method, path, **kwargs)  # type: ignore[arg-type]
            assert r.status_code == 422, (method, path, kwargs, r.status_code, r.text)
            assert r.json()["error"]["code"] == "invalid_input"
        same = await a.post("/v1/memory/rebind", json={"old": key, "new": key})
        assert same.status_code == 400  # the error table: UsageError
        anon = s.client("")
        async with anon:
            assert (await anon.post("/v1/memory/bind", json={"identity": PHONE})).status_code == 401


def _set_state(req: ModelRequest) -> ModelReply:
    last = req.messages[-1]
    if last.role == "user":  # "KEY=VALUE": set it (long term for "language")
        key, value = last.content.split("=", 1)
        args = {"key": key, "value": value}
        return ModelReply(
            text="", tool_calls=(ToolCall(id=f"s-{key}", name="set_state", arguments=json.dumps(args)),)
        )
    return ModelReply(text="noted")


async def test_a_threads_registers_are_readable_by_its_tenant_only() -> None:
    model = ScriptedModel(_set_state)
    registered = [
        Agent(name="assistant", model=model, subject=SubjectOptions(long_term=frozenset({"language"})))
    ]
    async with serve(registered) as s, hashing(s).client() as a, s.client(s.key_b) as b:
        key = (await a.post("/v1/memory/bind", json={"identity": PHONE})).json()["key"]
        for text in ("order_id=ORD-7892", "language=pt-PT"):
            r = await a.post("/v1/threads/t1/inputs", json={"content": text, "identity": PHONE})
            assert r.status_code == 202, r.text
        tenant = await s.runtime.store.authenticate(s.key_a)

        async def both_set() -> bool:
            regs = await s.runtime.registers(f"{tenant.id}/t1")
            return "language" in regs["long_term"] and "order_id" in regs["short_term"]

        await eventually(both_set)
        r = await a.get("/v1/threads/t1/registers")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["subject"] == key and body["turn"] == 2
        assert body["short_term"]["order_id"] == "ORD-7892"
        assert body["long_term"] == {"language": "pt-PT"}
        assert (await b.get("/v1/threads/t1/registers")).status_code == 404, "another tenant's thread"
        assert (await a.get("/v1/threads/nope/registers")).status_code == 404


async def test_recall_explains_and_add_takes_valid_and_observed_times() -> None:
    async with serve(agents()) as s, hashing(s).client() as a:
        key = (await a.post("/v1/memory/bind", json={"identity": PHONE})).json()["key"]
        addr = {"key": "shipping_address"}
        new = await a.post(
            "/v1/memory",
            json={
                "subject": key,
                "text": "Ship to 9 Mill Lane, Kingston",
                "tags": addr,
                "valid_from": 3000.0,
            },
        )
        old = await a.post(
            "/v1/memory",
            json={
                "subject": key,
                "text": "Ship to 12 Oak Street, Dover",
                "tags": addr,
                "valid_from": 1000.0,
                "observed_at": 5000.0,
            },
        )
        assert old.status_code == 201, old.text
        back = old.json()["record"]
        assert (back["valid_from"], back["invalid_at"]) == (1000.0, 3000.0), "a back-fill is history"
        r = await a.post(
            "/v1/memory/recall",
            json={"subjects": [key], "query": "Which city should the parcel go to?", "explain": True},
        )
        hit = r.json()["items"][0]
        assert hit["record"]["id"] == new.json()["record"]["id"]
        assert hit["explain"]["tier"] == 0 and "shipping_address" in hit["explain"]["structure"]
        plain = await a.post("/v1/memory/recall", json={"subjects": [key], "query": "ship"})
        assert plain.json()["items"][0]["explain"] is None
        bad = await a.post("/v1/memory", json={"subject": key, "text": "x", "valid_from": -1})
        assert bad.status_code == 422
