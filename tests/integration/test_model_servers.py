"""Treating a model server as a real one: recovery that follows it, streaming deadlines, the
model's own token counts learned from its usage, prompt cancellation of running slices."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dormant import Agent, Runtime
from dormant.errors import ModelError
from dormant.models.base import Finish, ModelEvent, ModelRequest, TextDelta
from dormant.models.breaker import CircuitBreaker
from dormant.records import Usage
from dormant.tokens import TokenCounter
from dormant.view import ratio
from tests.helpers import all_messages, eventually
from tests.integration.conftest import fast_settings


class Flaky:
    """A model behind an endpoint that is down until ``up``; it says so as a real adapter does."""

    name = "flaky"
    context_window = 8192
    max_output_tokens = 256
    encoding = "o200k_base"

    def __init__(self) -> None:
        self.up = False
        self.breaker = CircuitBreaker(
            "http://flaky.test/v1", threshold=1, cooldown_s=30.0, max_cooldown_s=60.0
        )
        self.checks = 0

    async def reachable(self) -> bool:
        self.checks += 1
        return self.up

    async def healthy(self) -> bool:
        return self.up

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.breaker.check()
        if not self.up:
            self.breaker.failure(unreachable=True)
            raise ModelError("cannot reach http://flaky.test/v1: refused", kind="outage", retry_after=30.0)
        self.breaker.success()
        yield TextDelta(text=f"answer to {request.thread_id}")
        yield Finish(reason="stop")


async def test_threads_waiting_on_a_server_run_as_soon_as_it_is_back(tmp_path: Path) -> None:
    model = Flaky()
    settings = fast_settings(model_check_s=0.05, retry_after_max_s=600.0)
    async with Runtime(f"sqlite:///{tmp_path}/x.db", [Agent(name="a", model=model)], settings=settings) as rt:
        running = asyncio.create_task(rt.run())
        try:
            for n in range(5):
                await rt.send(f"t{n}", "hello", key="k")

            async def all_wait() -> bool:
                return (await rt.status()).threads_waiting == 5

            await eventually(all_wait, timeout=10)
            thread = await rt.thread("t0")
            assert thread.wait_until > time.time() + 20, "each was told to wait ~30 s"
            model.up = True
            back = time.monotonic()

            async def all_answered() -> bool:
                return all([len(await all_messages(rt.store, f"t{n}")) == 2 for n in range(5)])

            await eventually(all_answered, timeout=5)
            took = time.monotonic() - back
        finally:
            rt.stop()
            await running
    assert took < 2.0, f"recovery took {took:.2f}s, not the 30 s the threads were told"
    assert model.checks > 0


class Paced:
    """Streams ``pieces`` pieces, ``gap`` seconds apart, after ``first`` seconds."""

    name = "paced"
    context_window = 8192
    max_output_tokens = 256
    encoding = "o200k_base"

    def __init__(self, first: float, gap: float, pieces: int, stall_after: int | None = None) -> None:
        self.first, self.gap, self.pieces, self.stall_after = first, gap, pieces, stall_after

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        await asyncio.sleep(self.first)
        for n in range(self.pieces):
            if self.stall_after is not None and n == self.stall_after:
                await asyncio.sleep(30)
            yield TextDelta(text=f"{n} ")
            await asyncio.sleep(self.gap)
        yield Finish(reason="stop")


@pytest.mark.parametrize(
    ("model", "error"),
    [
        (Paced(first=0.05, gap=0.1, pieces=8), None),  # 0.85 s in all: longer than either deadline
        (Paced(first=0.0, gap=0.2, pieces=8), None),  # every gap just under the deadline's
        (Paced(first=1.0, gap=0.0, pieces=1), "the model sent nothing within 0.4s"),
        (Paced(first=0.0, gap=0.0, pieces=3, stall_after=2), "stream stalled: no piece for 0.25s after 2"),
    ],
)
async def test_a_streaming_reply_has_a_first_piece_and_a_gap_deadline(
    tmp_path: Path, model: Paced, error: str | None
) -> None:
    settings = fast_settings(model_timeout_s=0.4, model_stream_timeout_s=0.25, model_retries=0)
    async with Runtime(f"sqlite:///{tmp_path}/x.db", [Agent(name="a", model=model)], settings=settings) as rt:
        await rt.send("t", "go", key="k")
        await rt.run_until_idle(timeout=10)
        thread = await rt.thread("t")
        if error is None:
            messages = await all_messages(rt.store, "t")
            assert messages[-1].content == "0 1 2 3 4 5 6 7 " and thread.status == "active"
        else:
            assert thread.status == "failed" and error in (thread.error or ""), thread.error


class Dense:
    """A server whose tokenizer cuts text into three times dormant's count; it refuses a
    prompt over its window as llama.cpp does and reports usage as servers do."""

    name = "dense"
    context_window = 2048
    max_output_tokens = 256
    encoding = "o200k_base"
    learns_tokens = True

    def __init__(self) -> None:
        self.counter = TokenCounter("o200k_base")
        self.accepted: list[int] = []
        self.refused: list[int] = []

    def real(self, request: ModelRequest) -> int:
        return 3 * ratio.estimate(request, self.counter) + 12

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        real = self.real(request)
        if real > self.context_window - self.max_output_tokens:
            self.refused.append(real)
            raise ModelError(
                f"model request refused, the prompt is over the model's window: HTTP 400: request "
                f"({real} tokens) exceeds the available context size ({self.context_window} tokens)",
                retryable=False,
                kind="context_overflow",
            )
        self.accepted.append(real)
        yield TextDelta(text="noted. " * 10)
        yield Finish(reason="stop", usage=Usage(prompt=real, completion=20))


async def test_a_thread_that_overflowed_once_does_not_overflow_again(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/x.db"
    model = Dense()
    text = "Служба поддержки получила запрос номер {n} про возврат заказа и доставку. " * 6
    async with Runtime(url, [Agent(name="a", model=model)], settings=fast_settings()) as rt:
        for n in range(24):
            await rt.send("t", text.format(n=n), key=f"k{n}")
            await rt.run_until_idle(timeout=30)
        thread = await rt.thread("t")
        state: dict[str, Any] = await rt.state("t")
    assert thread.status == "active" and thread.failures == 0, thread.error
    assert len(model.refused) <= 1, f"refused {len(model.refused)} times: {model.refused}"
    assert max(model.accepted) <= model.context_window - model.max_output_tokens
    assert ratio.STATE_KEY in state, "the ratio is kept with the thread"
    assert state[ratio.STATE_KEY]["model"] == "dense" and state[ratio.STATE_KEY]["ratio"] >= 3.0

    # a restarted process starts with no ratio in RAM: the thread's own is applied
    again = Dense()
    async with Runtime(url, [Agent(name="a", model=again)], settings=fast_settings()) as rt:
        await rt.send("t", text.format(n=99), key="k99")
        await rt.run_until_idle(timeout=30)
    assert again.refused == [] and again.accepted


class Hanging:
    name = "hanging"
    context_window = 8192
    max_output_tokens = 256
    encoding = "o200k_base"

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.started.set()
        await asyncio.sleep(3600)
        yield Finish(reason="stop")


async def test_cancelled_slices_keep_their_inputs_and_release_their_leases(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/x.db"
    model = Hanging()
    async with Runtime(url, [Agent(name="a", model=model)], settings=fast_settings()) as rt:
        await rt.send("t", "hello", key="k")
        running = asyncio.create_task(rt.run())
        await asyncio.wait_for(model.started.wait(), 10)
        started = time.monotonic()
        assert await rt.cancel_slices() == 1
        rt.stop()
        await asyncio.wait_for(running, 5)
        assert time.monotonic() - started < 2.0
        thread = await rt.thread("t")
        assert (thread.status, thread.failures, thread.error) == ("active", 0, None)
        assert await rt.store.has_work(["a"]), "the input is still pending"
        assert await all_messages(rt.store, "t") == []
    from dormant.models import echo_model

    async with Runtime(url, [Agent(name="a", model=echo_model())], settings=fast_settings()) as rt:
        await rt.run_until_idle(timeout=10)  # claimable at once: no lease to wait out
        assert [m.role for m in await all_messages(rt.store, "t")] == ["user", "assistant"]
