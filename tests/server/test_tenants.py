"""Tenants and keys: hashed at rest, revocable; a second tenant can reach nothing of the first."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import httpx

from dormant.agent import Agent
from dormant.models import echo_model
from dormant.server import ServerConfig
from dormant.store import open_store
from tests.helpers import eventually
from tests.server.support import serve


async def test_keys_are_stored_salted_and_hashed(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = open_store(f"sqlite:///{path}")
    await store.open()
    acme = await store.create_tenant("acme")
    _, token = await store.create_key(acme.id)
    _, token2 = await store.create_key(acme.id)
    assert (await store.authenticate(token)).id == acme.id
    await store.close()
    raw = path.read_bytes() + (
        path.with_name("t.db-wal").read_bytes() if path.with_name("t.db-wal").exists() else b""
    )
    for t in (token, token2):
        assert t[len("dk_") + 16 + 1 :].encode() not in raw
    rows = sqlite3.connect(path).execute("SELECT salt, digest FROM api_keys").fetchall()
    assert len({r[0] for r in rows}) == 2  # a salt per key
    assert all(len(r[1]) == 32 for r in rows)  # sha256


async def test_second_tenant_gets_404_on_every_route_with_the_first_tenants_ids() -> None:
    async with (
        serve([Agent(name="assistant", model=echo_model())]) as s,
        s.client() as a,
        s.client(s.key_b) as b,
    ):
        await a.post("/v1/threads", json={"id": "secret"})
        await a.post("/v1/threads/secret/inputs", json={"content": "hi"}, headers={"Idempotency-Key": "k"})

        async def two() -> bool:
            return len((await a.get("/v1/threads/secret/messages")).json()["items"]) == 2

        await eventually(two)
        # /v1/status counts only the caller's tenant: a's thread and messages, nothing for b
        status_a = (await a.get("/v1/status")).json()
        status_b = (await b.get("/v1/status")).json()
        assert status_a["threads_by_status"] == {"active": 1} and status_a["messages"] == 2
        assert status_b["threads_by_status"] == {} and status_b["messages"] == 0
        mine = (await a.get("/v1/threads/secret/messages", params={"limit": 1})).json()
        cursor = mine["next_cursor"]
        thread_cursor = "secre"
        # a blob of a's thread (a large tool output), readable by a through its thread
        tenant_a = await s.runtime.store.authenticate(s.key_a)
        stored = f"{tenant_a.id}/secret"
        ref = (await s.runtime.store.put_blob(stored, [b"private ", b"bytes"])).ref
        r = await a.get(f"/v1/threads/secret/blobs/{ref}", params={"offset": 8})
        assert r.status_code == 200 and r.content == b"bytes" and r.headers["x-blob-size"] == "13"
        assert (await b.post("/v1/threads", json={"id": "mine"})).status_code == 201

        tries: list[tuple[str, str, dict[str, object]]] = [
            ("GET", "/v1/threads/secret", {}),
            ("DELETE", "/v1/threads/secret", {}),
            ("GET", "/v1/threads/secret/messages", {"params": {"cursor": cursor}}),
            ("GET", "/v1/threads/secret/messages", {"params": {"order": "desc"}}),
            ("POST", "/v1/threads/secret/retry", {}),
            ("POST", "/v1/threads/secret/tool_results/call_1", {"json": {"content": "x"}}),
            ("GET", "/v1/threads/secret/events", {}),
            ("GET", "/v1/threads/secret/events", {"headers": {"Last-Event-ID": "1"}}),
            ("GET", f"/v1/threads/secret/blobs/{ref}", {}),
            ("GET", f"/v1/threads/mine/blobs/{ref}", {}),  # a's blob, named from b's own thread
            ("GET", f"/v1/threads/{stored}", {}),  # a's stored id, sent raw
            ("GET", f"/v1/threads/{stored}/messages", {}),
            (
                "POST",
                "/v1/responses",
                {
                    "json": {
                        "model": "assistant",
                        "input": "x",
                        "previous_response_id": "resp_" + b"secret".hex() + "_2",
                    }
                },
            ),
        ]
        for method, path, kwargs in tries:
            r = await b.request(method, path, **kwargs)  # type: ignore[arg-type]
            assert r.status_code == 404, (method, path, r.status_code, r.text)
            assert "hi" not in r.text and "private" not in r.text
            assert r.json()["error"]["code"] == "not_found"

        # listing from the first tenant's cursor shows nothing of it
        listed = (await b.get("/v1/threads", params={"cursor": thread_cursor})).json()
        assert listed == {"items": [], "next_cursor": None}
        assert [t["id"] for t in (await b.get("/v1/threads")).json()["items"]] == ["mine"]
        # an input to the same id makes the second tenant's own thread, not a write into the first's
        r = await b.post(
            "/v1/threads/secret/inputs", json={"content": "intruder"}, headers={"Idempotency-Key": "k"}
        )
        assert r.status_code == 202 and r.json()["duplicate"] is False
        await eventually(two)
        texts = [m["content"] for m in (await a.get("/v1/threads/secret/messages")).json()["items"]]
        assert "intruder" not in texts and "echo: intruder" not in texts
        # the same session name in chat is a different thread per tenant
        ra = await a.post(
            "/v1/chat/completions",
            json={"model": "assistant", "user": "u", "messages": [{"role": "user", "content": "from a"}]},
        )
        rb = await b.post(
            "/v1/chat/completions",
            json={"model": "assistant", "user": "u", "messages": [{"role": "user", "content": "from b"}]},
        )
        assert ra.json()["choices"][0]["message"]["content"] == "echo: from a"
        assert rb.json()["choices"][0]["message"]["content"] == "echo: from b"


async def test_revoked_key_is_refused_at_once() -> None:
    async with serve([Agent(name="assistant", model=echo_model())]) as s, s.client() as a:
        assert (await a.get("/v1/threads")).status_code == 200
        key_id = s.key_a.split("_")[1]
        await s.runtime.store.revoke_key(key_id)
        r = await a.get("/v1/threads")
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        async with httpx.AsyncClient(base_url=s.url) as anon:
            assert (await anon.get("/v1/status")).status_code == 401
            assert (await anon.get("/healthz")).status_code == 200


async def test_a_tenant_over_its_quotas_gets_429_and_the_other_tenant_does_not() -> None:
    config = ServerConfig(
        tenant_max_threads=2, tenant_admissions_per_s=0.5, tenant_admission_burst=3, poll_s=0.2
    )
    async with (
        serve([Agent(name="assistant", model=echo_model())], config=config) as s,
        s.client() as a,
        s.client(s.key_b) as b,
    ):
        assert (await a.post("/v1/threads/t1/inputs", json={"content": "x"})).status_code == 202
        assert (await a.post("/v1/threads/t2/inputs", json={"content": "x"})).status_code == 202
        third = await a.post("/v1/threads/t3/inputs", json={"content": "x"})  # a third thread
        assert third.status_code == 429 and third.json()["error"]["code"] == "quota_exceeded"
        assert (await a.post("/v1/threads", json={"id": "t4"})).status_code == 429
        assert (await a.post("/v1/threads/t1/inputs", json={"content": "x"})).status_code == 202
        flood = await a.post("/v1/threads/t2/inputs", json={"content": "x"})  # a fourth admission
        assert flood.status_code == 429 and int(flood.headers["retry-after"]) >= 1
        # the other tenant is not held back by either quota of the first
        for i in range(2):
            r = await b.post(f"/v1/threads/b{i}/inputs", json={"content": "x"})
            assert r.status_code == 202
