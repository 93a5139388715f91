"""Images and files uploaded as multipart/form-data: streamed to disk as they arrive, every
limit checked on the way (413/415/422 at once, nothing written), the parts in /messages."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import apsw
import httpx

from dormant.agent import Agent
from dormant.models import echo_model
from tests.helpers import eventually
from tests.media_samples import pdf, png
from tests.server.support import serve

AGENTS = [Agent(name="assistant", model=echo_model())]
ELF = b"\x7fELF\x02\x01\x01\x00" + bytes(4096)


async def messages(c: httpx.AsyncClient, thread: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (await c.get(f"/v1/threads/{thread}/messages")).json()["items"]
    return items


def counts(db: Path) -> tuple[int, int, int]:
    conn = apsw.Connection(str(db))
    try:
        (blobs,) = conn.execute("SELECT count(*) FROM blobs").fetchone() or (0,)
        (inputs,) = conn.execute("SELECT count(*) FROM inputs").fetchone() or (0,)
        (threads,) = conn.execute("SELECT count(*) FROM threads").fetchone() or (0,)
    finally:
        conn.close()
    return int(blobs), int(inputs), int(threads)


async def test_an_image_and_a_pdf_upload_are_stored_and_shown(tmp_path: Path) -> None:
    async with serve(AGENTS, store=f"sqlite:///{tmp_path}/d.db") as s, s.client() as c:
        form = [("content", "my parcel"), ("text", "a red box")]
        files = [("image", ("parcel.png", png(40, 30), "image/png"))]
        # the text field after a file is its text: httpx sends data fields first, so build the order by hand
        r = await c.post(
            "/v1/threads/t1/inputs",
            files=[
                ("content", (None, b"my parcel")),
                files[0],
                ("text", (None, form[1][1].encode())),
                ("file", ("invoice.pdf", pdf("No 4711"), "application/octet-stream")),
            ],
            headers={"Idempotency-Key": "k1"},
        )
        assert r.status_code == 202, r.text
        again = await c.post(  # the same key and body: a duplicate, nothing new written
            "/v1/threads/t1/inputs",
            files=[
                ("content", (None, b"my parcel")),
                files[0],
                ("text", (None, b"a red box")),
                ("file", ("invoice.pdf", pdf("No 4711"), "application/octet-stream")),
            ],
            headers={"Idempotency-Key": "k1"},
        )
        assert again.json()["duplicate"] is True and again.json()["input_id"] == r.json()["input_id"]
        other = await c.post(  # the same key, another file: refused
            "/v1/threads/t1/inputs",
            files=[("content", (None, b"my parcel")), ("image", ("p.png", png(41, 30), "image/png"))],
            headers={"Idempotency-Key": "k1"},
        )
        assert other.status_code == 422 and other.json()["error"]["code"] == "idempotency_mismatch"

        async def replied() -> bool:
            return len(await messages(c, "t1")) >= 2

        await eventually(replied)
        first = (await messages(c, "t1"))[0]
        assert first["content"] == "my parcel"
        image, invoice = first["parts"]
        assert {k: image[k] for k in ("kind", "media_type", "width", "height", "name", "text")} == {
            "kind": "image",
            "media_type": "image/png",
            "width": 40,
            "height": 30,
            "name": "parcel.png",
            "text": "a red box",
        }
        assert invoice["media_type"] == "application/pdf" and invoice["text"] == "No 4711"
        served = await c.get(f"/v1/threads/t1/blobs/{image['ref']}")
        assert served.content == png(40, 30)
        json_input = await c.post("/v1/threads/t1/inputs", json={"content": "json still works"})
        assert json_input.status_code == 202


async def test_refusals_answer_at_once_and_write_nothing(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    limits: dict[str, Any] = {"max_part_bytes": 64 * 1024, "max_parts_per_input": 2}
    async with serve(AGENTS, store=f"sqlite:///{db}", **limits) as s, s.client() as c:
        cases: list[tuple[list[Any], int]] = [
            ([("image", ("photo.jpg", ELF, "image/jpeg"))], 415),  # an executable named .jpg
            ([("image", ("cut.png", png(200, 200)[:90], "image/png"))], 415),  # truncated
            ([("file", ("big.bin", bytes(65 * 1024), "application/octet-stream"))], 413),
            ([("file", ("a.txt", b"a")), ("file", ("b.txt", b"b")), ("file", ("c.txt", b"c"))], 422),
            ([("content", (None, b"x\x00y")), ("file", ("a.txt", b"a"))], 422),  # NUL
            ([("nonsense", (None, b"1")), ("file", ("a.txt", b"a"))], 422),
            ([("priority", (None, b"7")), ("file", ("a.txt", b"a"))], 422),
        ]
        for files, status in cases:
            r = await c.post("/v1/threads/t9/inputs", files=files)
            assert r.status_code == status, (files[0][0], r.text)
        assert (await c.get("/v1/threads/t9")).status_code == 404
    assert counts(db) == (0, 0, 0)


async def test_the_thread_day_limit_answers_413_with_nothing_written(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    photo = png(40, 30)
    limit = len(photo) + 100
    async with serve(AGENTS, store=f"sqlite:///{db}", max_thread_day_part_bytes=limit) as s, s.client() as c:
        first = await c.post("/v1/threads/t1/inputs", files=[("image", ("a.png", photo, "image/png"))])
        assert first.status_code == 202, first.text
        before = counts(db)
        again = await c.post("/v1/threads/t1/inputs", files=[("image", ("b.png", png(41, 30), "image/png"))])
        assert again.status_code == 413
        assert "daily limit" in again.json()["error"]["message"]
        after = counts(db)
        assert after[0] == before[0] and after[1] <= before[1]  # no blob, no input (one may be consumed)


async def test_a_huge_upload_is_refused_reading_only_up_to_the_limit(tmp_path: Path) -> None:
    """40 MB streamed against a 1 MiB part limit: 413 after about 1 MiB read (in process),
    and through the live server; RSS flat either way."""
    db = tmp_path / "d.db"
    async with serve(AGENTS, store=f"sqlite:///{db}", max_part_bytes=1024 * 1024) as s:
        sent = 0
        boundary = "dormantboundary"

        async def body() -> AsyncIterator[bytes]:
            nonlocal sent
            head = (
                f'--{boundary}\r\nContent-Disposition: form-data; name="content"\r\n\r\nbig\r\n'
                f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\n\r\n'
            ).encode()
            yield head
            chunk = os.urandom(64 * 1024)
            for _ in range(40 * 16):  # 40 MiB
                sent += len(chunk)
                yield chunk
            yield f"\r\n--{boundary}--\r\n".encode()

        before = rss()
        transport = httpx.ASGITransport(app=s.app)  # in process: the app's reads are this process's RAM
        headers = {
            "Authorization": f"Bearer {s.key_a}",
            "Content-Type": f"multipart/form-data; boundary={boundary}",
        }
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            r = await c.post("/v1/threads/big/inputs", content=body(), headers=headers)
        assert r.status_code == 413, r.text
        assert "limit of 1048576" in r.json()["error"]["message"]
        assert sent <= 2 * 1024 * 1024  # the parser stopped asking for bytes past the limit
        assert rss() - before < 20 * 1024 * 1024
        async with s.client() as live:  # through uvicorn: the client sends it all, the server reads on
            sent = 0
            form = {"Content-Type": headers["Content-Type"]}
            r = await live.post("/v1/threads/big/inputs", content=body(), headers=form)
        assert r.status_code == 413 and sent == 40 * 1024 * 1024, r.text
        assert rss() - before < 20 * 1024 * 1024
    assert counts(db) == (0, 0, 0)


async def test_a_large_upload_is_stored_without_the_server_holding_it(tmp_path: Path) -> None:
    """24 MiB of an opaque file taken through the live server: stored whole, while the
    process's RSS, sampled every 5 ms by a watcher process, grows by under 10 MB."""
    import json
    import signal
    import sys

    from dormant.bench.upload import BOUNDARY, body, until_catching

    size = 24 * 1024 * 1024
    limits: dict[str, Any] = {"max_part_bytes": 32 * 1024 * 1024, "max_input_parts_bytes": 32 * 1024 * 1024}
    db = tmp_path / "d.db"
    form = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    async with serve(AGENTS, store=f"sqlite:///{db}", **limits) as s, s.client() as c:
        warm = await c.post("/v1/threads/warm/inputs", content=body(1024 * 1024, "w.bin"), headers=form)
        assert warm.status_code == 202, warm.text
        before = rss()
        report = tmp_path / "rss.json"
        watcher = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "dormant.bench.rsswatch", str(os.getpid()), str(report), "0.005"
        )
        try:
            await until_catching(watcher.pid)
            r = await c.post("/v1/threads/big/inputs", content=body(size, "big.bin"), headers=form)
            assert r.status_code == 202, r.text

            async def replied() -> bool:
                return len(await messages(c, "big")) >= 2

            await eventually(replied)
        finally:
            watcher.send_signal(signal.SIGTERM)
            await asyncio.wait_for(watcher.wait(), 10)
        (part,) = (await messages(c, "big"))[0]["parts"]
        assert part["size"] == size and part["media_type"] == "application/octet-stream"
        watched = json.loads(report.read_text())
        assert watched["samples"] > 10
        assert watched["max_rss_bytes"] - before < 10 * 1000 * 1000, watched


def rss() -> int:
    """The process's resident set, in bytes."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
