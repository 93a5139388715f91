"""The dispatcher: runs async tool calls from the outbox.

It leases due entries (never more than it has free slots), runs each with its
tool's timeout, and records the outcome; a ``done`` or ``dead`` outcome admits
the tool result as an input of the calling thread, dedup key = call id, in the
same transaction. The call id is also handed to the tool as its idempotency key.

Retry rules: a tool raising ``ToolError(retryable=True)`` is retried with
exponential backoff; a timeout is retried only for idempotent tools; any other
exception becomes an error result the agent sees. After ``max_attempts`` the
entry is dead-lettered and the agent receives an error result, so every call is
answered exactly once. Entries found running with an expired lease are
reconciled by the store (see ``Store.claim_outbox``).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping

from .agent import Agent
from .errors import DormantError, ToolError
from .metrics import RuntimeStats
from .records import OutboxEntry, OutboxOutcome
from .store.base import Store
from .tools import ToolContext

log = logging.getLogger("dormant.dispatcher")


def backoff(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Delay before retry number ``attempt`` (1, 2, ...): exponential, capped, jittered."""
    delay: float = min(cap, base * (2 ** max(0, attempt - 1)))
    jitter = (rng or random).uniform(0.8, 1.2)
    return min(cap, delay * jitter)


def truncate(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, with a note of what was cut."""
    data = text.encode()
    if len(data) <= limit:
        return text
    note = f"\n[... output truncated: {len(data)} bytes, first {limit - 100} shown]"
    return data[: max(0, limit - 100)].decode(errors="ignore") + note


class Dispatcher:
    """Runs outbox entries with bounded concurrency."""

    def __init__(
        self,
        store: Store,
        agents: Mapping[str, Agent],
        stats: RuntimeStats,
        *,
        worker: str,
        concurrency: int,
        max_attempts: int,
        retry_base_s: float,
        retry_max_s: float,
        poll_s: float,
        max_result_bytes: int,
        clock: Callable[[], float],
        on_result: Callable[[], None],
    ) -> None:
        self.store = store
        self.agents = agents
        self.stats = stats
        self.worker = worker
        self.concurrency = concurrency
        self.max_attempts = max_attempts
        self.retry_base_s = retry_base_s
        self.retry_max_s = retry_max_s
        self.poll_s = poll_s
        self.max_result_bytes = max_result_bytes
        self.clock = clock
        self.on_result = on_result
        self.wake = asyncio.Event()
        timeouts = [t.timeout for a in agents.values() for t in a.tools] or [30.0]
        # a lease outlives the slowest call, so only a dead worker lets one expire
        self.lease_s = max(timeouts) + 30.0
        self._running: set[asyncio.Task[None]] = set()

    @property
    def active(self) -> int:
        """Calls running now."""
        return len(self._running)

    async def run(self, stop: asyncio.Event) -> None:
        """Claim and run calls until ``stop`` is set; then let running calls finish."""
        try:
            while not stop.is_set():
                self.wake.clear()
                free = self.concurrency - len(self._running)
                entries: list[OutboxEntry] = []
                try:
                    entries = await self.store.claim_outbox(self.worker, free, self.lease_s)
                except DormantError as exc:
                    log.warning("outbox_claim_failed", extra={"error": str(exc)})
                for entry in entries:
                    task = asyncio.create_task(self._run_call(entry), name=f"call:{entry.call_id}")
                    self._running.add(task)
                    task.add_done_callback(self._done)
                await self._sleep(stop)
        finally:
            if self._running:
                await asyncio.gather(*self._running, return_exceptions=True)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        self.wake.set()

    async def _sleep(self, stop: asyncio.Event) -> None:
        waiters = [asyncio.ensure_future(self.wake.wait()), asyncio.ensure_future(stop.wait())]
        try:
            await asyncio.wait(waiters, timeout=self.poll_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def _run_call(self, entry: OutboxEntry) -> None:
        outcome = await self.execute(entry)
        try:
            held = await self.store.finish_outbox([outcome])
        except DormantError as exc:
            # not recorded: the lease will expire and the store reconciles the entry
            log.error("outbox_finish_failed", extra={"call_id": entry.call_id, "error": str(exc)})
            return
        if not held[0]:
            log.warning("outbox_lease_lost", extra={"call_id": entry.call_id})
        self.on_result()

    async def execute(self, entry: OutboxEntry) -> OutboxOutcome:
        """Run one entry's tool and decide its outcome (no store writes)."""
        self.stats.tool_calls += 1
        agent = self.agents.get(entry.agent)
        spec = agent.toolbox.get(entry.tool) if agent else None
        if spec is None:
            return self._final(entry, f"error: no tool {entry.tool!r} for agent {entry.agent!r}", "dead")
        try:
            args = spec.parse(entry.arguments)
        except ValueError as exc:
            return self._final(entry, f"error: {exc}", "done", is_error=True)
        ctx = ToolContext(
            thread_id=entry.thread_id,
            call_id=entry.call_id,
            agent=entry.agent,
            attempt=entry.attempts,
            now=self.clock(),
            inline=False,
        )
        try:
            async with asyncio.timeout(spec.timeout):
                content = await spec.invoke(args, ctx)
        except ToolError as exc:
            if exc.retryable:
                return self._retry(entry, f"{exc}")
            return self._final(entry, f"error: {exc}", "done", is_error=True)
        except TimeoutError:
            reason = f"timed out after {spec.timeout:g}s"
            if spec.idempotent:
                return self._retry(entry, reason)
            return self._final(entry, f"error: {reason}", "done", is_error=True)
        except Exception as exc:  # a tool's bug is the agent's information, not our crash
            return self._final(entry, f"error: {type(exc).__name__}: {exc}", "done", is_error=True)
        return self._final(entry, content, "done")

    def _retry(self, entry: OutboxEntry, reason: str) -> OutboxOutcome:
        if entry.attempts >= self.max_attempts:
            text = f"error: gave up after {entry.attempts} attempts: {reason}"
            return self._final(entry, text, "dead", error=reason)
        self.stats.tool_retries += 1
        delay = backoff(entry.attempts, self.retry_base_s, self.retry_max_s)
        assert entry.token is not None
        return OutboxOutcome(
            entry_id=entry.id,
            token=entry.token,
            kind="retry",
            retry_at=self.clock() + delay,
            error=reason,
        )

    def _final(
        self,
        entry: OutboxEntry,
        content: str,
        kind: str,
        *,
        is_error: bool = False,
        error: str | None = None,
    ) -> OutboxOutcome:
        assert entry.token is not None
        if kind == "dead":
            is_error = True
            self.stats.tool_failures += 1
        return OutboxOutcome(
            entry_id=entry.id,
            token=entry.token,
            kind="dead" if kind == "dead" else "done",
            content=truncate(content, self.max_result_bytes),
            is_error=is_error,
            error=error or (content if is_error else None),
        )
