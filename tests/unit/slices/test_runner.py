"""The slice runner's failure policy and reply cleaning, over the in-memory store."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator

import pytest

from dormant.agent import Agent
from dormant.config import Settings
from dormant.errors import ModelError
from dormant.metrics import RuntimeStats
from dormant.models.base import ModelReply, ModelRequest
from dormant.models.scripted import ScriptedModel
from dormant.records import Claim, NewInput, Thread, ToolCall
from dormant.slices.runner import SliceRunner, clean_reply, failures_of
from dormant.store.sqlite import SQLiteStore
from tests.helpers import FakeClock

CAP = 120.0


class Released(SQLiteStore):
    """Records the retry time of each release."""

    retry_at: list[float]

    async def release(
        self,
        claim: Claim,
        *,
        retry_at: float = 0.0,
        error: str | None = None,
        fail: bool = False,
        wait: str | None = None,
    ) -> None:
        self.retry_at.append(retry_at)
        await super().release(claim, retry_at=retry_at, error=error, fail=fail, wait=wait)


@pytest.fixture
async def store(clock: FakeClock) -> AsyncIterator[Released]:
    s = Released("memory://", clock=clock)
    s.retry_at = []
    await s.open()
    yield s
    await s.close()


def runner_for(store: SQLiteStore, clock: FakeClock, retry_after: float) -> SliceRunner:
    def script(req: ModelRequest) -> ModelReply:
        raise ModelError("slow down", retry_after=retry_after)

    agent = Agent(name="a", model=ScriptedModel(script), builtins=False)
    settings = Settings.build(retry_after_max_s=CAP, retry_base_s=0.5, retry_max_s=5.0)
    return SliceRunner(
        store,
        {"a": agent},
        settings,
        RuntimeStats(),
        clock=clock,
        hold=lambda s: None,
        on_commit=lambda: None,
        on_damage=lambda exc: None,
    )


@pytest.mark.parametrize("retry_after", [math.inf, 1e12, CAP * 10])
async def test_a_huge_retry_after_is_capped(store: Released, clock: FakeClock, retry_after: float) -> None:
    """``Retry-After: inf`` (or 1e12) must not put a thread off for ever."""
    await store.admit([NewInput(thread_id="t1", kind="user", dedup_key="k", content="hi", agent="a")])
    (claim,) = await store.claim_threads("w", 1, 30.0)
    await runner_for(store, clock, retry_after).run(claim)
    (retry_at,) = store.retry_at
    assert clock.now < retry_at <= clock.now + CAP


async def test_a_small_retry_after_is_honoured(store: Released, clock: FakeClock) -> None:
    await store.admit([NewInput(thread_id="t1", kind="user", dedup_key="k", content="hi", agent="a")])
    (claim,) = await store.claim_threads("w", 1, 30.0)
    await runner_for(store, clock, 30.0).run(claim)
    assert store.retry_at == [clock.now + 30.0]


def test_clean_reply_cleans_text_and_calls_and_keeps_clean_replies() -> None:
    """A model reply with NUL or lone surrogates is cleaned before it is stored."""
    dirty = ModelReply(
        text="a\x00b \udc80",
        tool_calls=(ToolCall(id="c\x001", name="ls", arguments='{"p": "\udcff\x00"}'),),
    )
    cleaned = clean_reply(dirty)
    assert cleaned.text == "ab \ufffd"
    assert cleaned.tool_calls == (ToolCall(id="c1", name="ls", arguments='{"p": "\ufffd"}'),)
    fine = ModelReply(text="ok", tool_calls=(ToolCall(id="c1", name="ls", arguments="{}"),))
    assert clean_reply(fine) is fine


def test_failures_read_the_claims_attempt_count_when_it_has_one() -> None:
    """attempts counted at claim time win over the thread's count."""
    thread = Thread(id="t1", agent="a", failures=1)
    assert failures_of(Claim(thread_id="t1", token="x", expires_at=0.0), thread) == 2

    class Counted(Claim, frozen=True, kw_only=True):
        attempts: int = 0

    assert failures_of(Counted(thread_id="t1", token="x", expires_at=0.0, attempts=7), thread) == 7


def test_clean_reply_cleans_reasoning_and_finish_reason_even_when_the_text_is_clean() -> None:
    """Reasoning is stored too (PostgreSQL text cannot hold NUL)."""
    dirty = ModelReply(text="ok", reasoning="th\x00ink \udc80", finish_reason="sto\x00p")
    cleaned = clean_reply(dirty)
    assert (cleaned.text, cleaned.reasoning, cleaned.finish_reason) == ("ok", "think \ufffd", "stop")


async def test_an_outage_releases_the_thread_with_its_wait_reason_uncounted(
    store: Released, clock: FakeClock
) -> None:
    """A thread waiting on a model endpoint that is down says why and until when."""

    def script(req: ModelRequest) -> ModelReply:
        raise ModelError(
            "model endpoint http://m/v1 is failing; circuit open", retry_after=20.0, kind="outage"
        )

    runner = runner_for(store, clock, 0.0)
    runner.agents = {"a": Agent(name="a", model=ScriptedModel(script), builtins=False)}
    await store.admit([NewInput(thread_id="t1", kind="user", dedup_key="k", content="hi", agent="a")])
    (claim,) = await store.claim_threads("w", 1, 30.0)
    await runner.run(claim)
    thread = await store.get_thread("t1")
    assert (thread.status, thread.failures) == ("active", 0)
    assert thread.wait_reason == "ModelError: model endpoint http://m/v1 is failing; circuit open"
    assert thread.wait_until == clock.now + 20.0 == store.retry_at[0]
