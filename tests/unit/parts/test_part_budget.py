"""The process-wide budget of part bytes held by model requests in flight: bounded,
FIFO-fair, given back on success, error and cancel, and never a deadlock."""

from __future__ import annotations

import asyncio
import base64
import gc
import tracemalloc

import httpx
import pytest

from dormant.errors import ModelError
from dormant.models.base import ModelRequest, collect
from dormant.models.openai import OpenAIChatModel
from dormant.parts.budget import PartBudget, encoded_size
from dormant.parts.render import inline_bytes
from dormant.records import Message, Part
from tests.openai_server import DONE, ScriptServer, delta, fresh_breakers, server, text_reply

__all__ = ["fresh_breakers", "server"]  # fixtures, used by name

SIZE = 30_000  # raw bytes of each image
IMAGES = 3  # per request


def part(i: int) -> Part:
    return Part(kind="image", ref=f"sha256:{i:064d}", media_type="image/png", size=SIZE, width=9, height=9)


class Blobs:
    """A fake blob source: counts the bytes read by requests the server has not yet answered."""

    def __init__(self) -> None:
        self.live = 0
        self.peak = 0
        self.reads = 0

    async def fetch(self, ref: str) -> bytes:
        self.reads += 1
        await asyncio.sleep(0)
        self.live += SIZE
        self.peak = max(self.peak, self.live)
        return b"x" * SIZE


def request(blobs: Blobs, base: int = 0, images: int = IMAGES) -> ModelRequest:
    message = Message(seq=1, role="user", content="see", parts=tuple(part(base + k) for k in range(images)))
    return ModelRequest(thread_id="t", system="", messages=(message,), blobs=blobs.fetch)


def reply() -> bytes:
    return delta({"role": "assistant", "content": "ok"}) + delta({}, finish="stop") + DONE


def model(blobs: Blobs, budget: PartBudget, status: int = 200, delay: float = 0.01) -> OpenAIChatModel:
    async def handle(req: httpx.Request) -> httpx.Response:
        inlined = req.content.count(b";base64,")
        await asyncio.sleep(delay)
        blobs.live -= inlined * SIZE  # the server has read the body: these bytes are done with
        if status != 200:
            return httpx.Response(status, json={"error": {"message": "no"}})
        return httpx.Response(200, content=reply(), headers={"content-type": "text/event-stream"})

    client = httpx.AsyncClient(transport=httpx.MockTransport(handle))
    return OpenAIChatModel(
        model="v", base_url="http://x/v1", dialect="vision", client=client, max_retries=0, part_budget=budget
    )


ONE = IMAGES * encoded_size(SIZE)  # what one request reserves


def test_the_reservation_is_each_inlined_blobs_base64_length() -> None:
    assert encoded_size(0) == 0 and encoded_size(1) == 4 and encoded_size(3) == 4 and encoded_size(4) == 8
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": part(1).ref}}] * 2}]
    assert inline_bytes(messages, {part(1).ref: 10}) == 2 * 16
    assert inline_bytes([{"role": "user", "content": "text"}], {}) == 0


async def test_concurrent_requests_never_hold_more_than_the_budget() -> None:
    blobs, budget = Blobs(), PartBudget(2 * ONE)
    m = model(blobs, budget)
    replies = await asyncio.wait_for(
        asyncio.gather(*(collect(m.stream(request(blobs, 10 * i))) for i in range(12))), 10
    )
    assert all(r.text == "ok" for r in replies)
    assert blobs.reads == 12 * IMAGES
    assert 0 < blobs.peak <= 2 * IMAGES * SIZE  # two requests' images at most, never twelve
    s = budget.stats()
    assert (s.held, s.holders, s.waiting) == (0, 0, 0)
    assert s.peak == 2 * ONE and s.waits >= 10


async def test_a_text_only_request_never_waits() -> None:
    blobs, budget = Blobs(), PartBudget(ONE)
    m = model(blobs, budget)
    await budget.acquire(ONE)  # the budget is all taken
    plain = ModelRequest(thread_id="t", system="", messages=(Message(seq=1, role="user", content="hi"),))
    reply = await asyncio.wait_for(collect(m.stream(plain)), 5)
    assert reply.text == "ok" and budget.stats().waits == 0


async def test_an_error_gives_the_bytes_back() -> None:
    blobs, budget = Blobs(), PartBudget(ONE)
    m = model(blobs, budget, status=400)
    for _ in range(3):
        with pytest.raises(ModelError):
            await asyncio.wait_for(collect(m.stream(request(blobs))), 5)
    assert (budget.held, budget.holders) == (0, 0)


async def test_a_failed_blob_read_gives_the_bytes_back() -> None:
    budget = PartBudget(ONE)

    async def broken(ref: str) -> bytes:
        raise OSError("disk")

    m = model(Blobs(), budget)
    message = Message(seq=1, role="user", content="see", parts=(part(1),))
    with pytest.raises(OSError):
        await collect(m.stream(ModelRequest(thread_id="t", system="", messages=(message,), blobs=broken)))
    assert (budget.held, budget.holders) == (0, 0)


async def test_a_cancelled_request_gives_the_bytes_back_waiting_or_holding() -> None:
    blobs, budget = Blobs(), PartBudget(ONE)
    m = model(blobs, budget, delay=10)
    holding = asyncio.create_task(collect(m.stream(request(blobs))))
    await asyncio.sleep(0.05)
    assert budget.held == ONE
    waiting = asyncio.create_task(collect(m.stream(request(blobs, 10))))
    await asyncio.sleep(0.05)
    assert budget.stats().waiting == 1
    waiting.cancel()
    holding.cancel()
    await asyncio.gather(holding, waiting, return_exceptions=True)
    assert (budget.held, budget.holders, budget.stats().waiting) == (0, 0, 0)
    await asyncio.wait_for(budget.acquire(ONE), 1)  # all of it free again


async def test_a_request_larger_than_the_budget_goes_alone_and_does_not_deadlock() -> None:
    blobs, budget = Blobs(), PartBudget(ONE // 2)
    m = model(blobs, budget)
    big = [asyncio.create_task(collect(m.stream(request(blobs, 10 * i)))) for i in range(3)]
    replies = await asyncio.wait_for(asyncio.gather(*big), 10)
    assert all(r.text == "ok" for r in replies)
    assert blobs.peak == IMAGES * SIZE  # one at a time
    s = budget.stats()
    assert s.oversize == 3 and s.peak == ONE and s.held == 0


async def test_waiters_are_served_first_come_first_served() -> None:
    budget = PartBudget(100)
    order: list[str] = []
    await budget.acquire(90)

    async def take(name: str, n: int) -> None:
        await budget.acquire(n)
        order.append(name)

    big = asyncio.create_task(take("big", 50))
    await asyncio.sleep(0)
    small = asyncio.create_task(take("small", 5))  # it would fit now, but comes after big
    await asyncio.sleep(0.01)
    assert order == [] and budget.stats().waiting == 2
    budget.release(90)
    await asyncio.gather(big, small)
    assert order == ["big", "small"] and budget.held == 55


async def test_a_cancelled_head_of_the_queue_lets_the_next_in() -> None:
    budget = PartBudget(100)
    await budget.acquire(90)
    big = asyncio.create_task(budget.acquire(50))
    await asyncio.sleep(0)
    small = asyncio.create_task(budget.acquire(5))
    await asyncio.sleep(0.01)
    big.cancel()
    await asyncio.wait_for(small, 1)  # fits beside the 90 once big no longer waits ahead of it
    assert budget.held == 95 and big.cancelled()


async def test_a_waiter_cancelled_once_granted_gives_its_grant_back() -> None:
    budget = PartBudget(100)
    await budget.acquire(100)
    waiter = asyncio.create_task(budget.acquire(60))
    await asyncio.sleep(0.01)
    budget.release(100)  # grants the waiter its 60 ...
    waiter.cancel()  # ... which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert (budget.held, budget.holders) == (0, 0)


async def test_raising_the_limit_wakes_waiters() -> None:
    budget = PartBudget(10)
    await budget.acquire(10)
    waiter = asyncio.create_task(budget.acquire(10))
    await asyncio.sleep(0.01)
    assert not waiter.done()
    budget.limit = 20
    await asyncio.wait_for(waiter, 1)
    assert budget.held == 20


def test_the_data_uri_is_what_was_reserved() -> None:
    data = b"x" * SIZE
    assert len(base64.b64encode(data)) == encoded_size(SIZE)


async def test_a_done_requests_body_is_freed_at_once_not_by_the_garbage_collector(
    server: ScriptServer,
) -> None:
    """httpx's request objects sit in reference cycles: a body they held would outlive the
    budget's release until the cyclic collector ran (with 64 slices, ~1 GB of them)."""
    blobs = Blobs()
    m = OpenAIChatModel(
        model="v", base_url=server.base_url, dialect="vision", max_retries=0, part_budget=PartBudget(ONE)
    )
    server.script(*(text_reply("ok") for _ in range(6)))
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        for i in range(6):
            assert (await collect(m.stream(request(blobs, 10 * i)))).text == "ok"
        # what the adapter allocated and is still alive (the server, in this process, keeps its own copies)
        kept = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(True, "*dormant/models/openai.py")]
        )
        alive = sum(stat.size for stat in kept.statistics("filename"))
    finally:
        tracemalloc.stop()
        gc.enable()
        await m.aclose()
    assert alive < ONE // 2  # not one body left (six of ONE each without the buffer)
    assert server.received[-1].body["messages"][-1]["content"][1]["image_url"]["url"].startswith("data:")
