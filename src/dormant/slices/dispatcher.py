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
reconciled by the store (see ``Store.claim_outbox``); attempts are counted at
claim, so an entry claimed more than ``max_attempts`` times (its runs killed or
wedged their workers) is dead-lettered without running again.

A result over the blob threshold is stored as a blob first
(:func:`~dormant.tools.blobs.stash`, within the tool's timeout): the result admitted is
its excerpt, so a huge output never meets the input size limit.

Store failures never kill the loop: a failed claim is retried with a capped
backoff, and an outcome the store could not record (locked, full) is kept and
recorded again until it sticks, the lease is lost, or the lease runs out; only
then is the entry left to the store's reconciliation. A damaged database
(:class:`~dormant.errors.SchemaError`) ends the loop with that error.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping

from .. import logs
from ..agent import Agent
from ..errors import DormantError, Overloaded, SchemaError, StoreError, ToolError
from ..metrics import RuntimeStats
from ..parts import Limits
from ..records import OutboxEntry, OutboxOutcome, Part
from ..store.base import Store
from ..text import clean, truncate
from ..tools import blobs
from ..tools.pool import ToolThreads
from ..tools.results import stored_result
from ..tools.spec import ToolContext, ToolProgress, timeout_reason
from .deadline import Deadline
from .retry import STORE_RETRY_MAX_S, backoff, log_store_failure, pause

log = logging.getLogger("dormant.dispatcher")


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
        blob_threshold: int = blobs.DEFAULT_THRESHOLD,
        tool_threads: ToolThreads | None = None,
        part_limits: Limits | None = None,
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
        self.blob_threshold = blob_threshold
        #: the limits on the images and files a tool returns (those of admitted parts)
        self.part_limits = part_limits or Limits()
        #: optional observer of progress a running call reports (an MCP server's progress
        #: notifications): ``(thread_id, ToolProgress)``; the server publishes it on the
        #: thread's event stream. Never durable, and never allowed to fail the call.
        self.on_progress: Callable[[str, ToolProgress], None] | None = None
        self.tool_threads = tool_threads
        self.wake = asyncio.Event()
        timeouts = [t.timeout for a in agents.values() for t in a.tools] or [30.0]
        # an MCP tool is found when a worker starts; its server bounds its calls
        timeouts += [s.max_call_s + s.start_timeout + 5.0 for a in agents.values() for s in a.mcp]
        # a lease outlives the slowest call, so only a dead worker lets one expire
        self.lease_s = max(timeouts) + 30.0
        self._running: set[asyncio.Task[None]] = set()
        self._stop: asyncio.Event | None = None

    @property
    def tools(self) -> tuple[tuple[str, str], ...]:
        """The (agent, tool) pairs hosted here now (MCP tools once listed): only their
        calls are claimed."""
        return tuple((a.name, name) for a in self.agents.values() for name in a.toolbox.names())

    @property
    def active(self) -> int:
        """Calls running now."""
        return len(self._running)

    def _progress_of(self, thread_id: str) -> Callable[[ToolProgress], None]:
        def report(event: ToolProgress) -> None:
            observer = self.on_progress
            if observer is not None:
                try:
                    observer(thread_id, event)
                except Exception as exc:  # an observer never fails the call
                    log.debug("progress_observer_failed", extra={"thread_id": thread_id, "error": repr(exc)})

        return report

    async def run(self, stop: asyncio.Event) -> None:
        """Claim and run calls until ``stop`` is set; then let running calls finish.

        Raises :class:`SchemaError` (after running calls end) if the database is damaged.
        """
        self._stop = stop
        failures = 0
        try:
            while not stop.is_set():
                self.wake.clear()
                free = self.concurrency - len(self._running)
                try:
                    entries = await self.store.claim_outbox(self.worker, free, self.lease_s, tools=self.tools)
                except SchemaError:
                    raise
                except Exception as exc:  # the loop must outlive any store failure
                    failures += 1
                    log_store_failure(log, "outbox_claim_failed", exc, failures)
                    await pause(stop, backoff(failures, self.poll_s, STORE_RETRY_MAX_S))
                    continue
                if failures:
                    log.warning("outbox_claims_resumed", extra={"failures": failures})
                    failures = 0
                deadline = time.monotonic() + self.lease_s
                for entry in entries:
                    task = asyncio.create_task(self._run_call(entry, deadline), name=f"call:{entry.call_id}")
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

    async def _run_call(self, entry: OutboxEntry, deadline: float) -> None:
        logs.bind(thread_id=entry.thread_id, call_id=entry.call_id)  # on every record of this call
        started = time.perf_counter()
        outcome = await self.execute(entry)
        self.stats.tool_latency.add(time.perf_counter() - started)
        held = await self._record(entry, outcome, deadline)
        if held is None:
            return
        if not held:
            log.warning("outbox_lease_lost", extra={"call_id": entry.call_id})
        self.on_result()

    async def _record(self, entry: OutboxEntry, outcome: OutboxOutcome, deadline: float) -> bool | None:
        """Record ``outcome``, retrying while the store fails and the lease may still hold.

        Answers whether the lease was held, or None when the outcome could not be
        recorded: the lease then expires and the store reconciles the entry (an
        idempotent call runs again, any other is answered "outcome unknown").
        """
        failures = 0
        while True:
            try:
                return (await self.store.finish_outbox([outcome]))[0]
            except Exception as exc:
                failures += 1
                delay = backoff(failures, self.retry_base_s, STORE_RETRY_MAX_S)
                stopping = self._stop is not None and self._stop.is_set() and failures >= 3
                transient = isinstance(exc, StoreError | Overloaded) and not isinstance(exc, SchemaError)
                if not transient or stopping or time.monotonic() + delay >= deadline:
                    log.error(
                        "outbox_finish_failed",
                        extra={"call_id": entry.call_id, "error": f"{type(exc).__name__}: {exc}"},
                        exc_info=None if isinstance(exc, DormantError) else exc,
                    )
                    return None
                log_store_failure(log, "outbox_finish_retry", exc, failures)
                await asyncio.sleep(delay)

    async def execute(self, entry: OutboxEntry) -> OutboxOutcome:
        """Run one entry's tool and decide its outcome (no store writes)."""
        self.stats.tool_calls += 1
        agent = self.agents.get(entry.agent)
        spec = agent.toolbox.get(entry.tool) if agent else None
        if spec is None:
            return self._final(entry, f"error: no tool {entry.tool!r} for agent {entry.agent!r}", "dead")
        if entry.attempts > self.max_attempts:
            # the store counted this claim: the earlier runs ended without an outcome (their
            # worker died or wedged, and the lease expired); never run a poison pill again
            reason = (
                f"the call was claimed {entry.attempts} times and its earlier {entry.attempts - 1} "
                "runs ended without an outcome (did each kill its worker?)"
            )
            return self._final(entry, f"error: gave up: {reason}", "dead", error=reason)
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
            blobs=self.store,
            blob_writer=self.store,
            blob_threshold=self.blob_threshold,
            tool_threads=self.tool_threads,
            progress=self._progress_of(entry.thread_id),
        )
        try:
            with Deadline(spec.timeout):
                output = await spec.run(args, ctx)
                done = await stored_result(
                    self.store, entry.thread_id, output, self.blob_threshold, self.part_limits
                )
        except ToolError as exc:
            if exc.retryable:
                return self._retry(entry, f"{exc}")
            return self._final(entry, f"error: {exc}", "done", is_error=True)
        except TimeoutError:
            # a sync call that never got a thread did not run: safe to retry, idempotent or
            # not; one that ran and is not idempotent has an unknown outcome (it may still act)
            reason, ran = timeout_reason(spec, ctx)
            if spec.idempotent or not ran:
                return self._retry(entry, reason)
            return self._final(entry, f"error: {reason}", "done", is_error=True)
        except (StoreError, Overloaded) as exc:  # storing a large output failed
            if spec.idempotent and not isinstance(exc, SchemaError):
                return self._retry(entry, f"the output could not be stored: {exc}")
            text = f"error: the tool ran but its output could not be stored: {type(exc).__name__}: {exc}"
            return self._final(entry, text, "done", is_error=True)
        except Exception as exc:  # a tool's bug is the agent's information, not our crash
            return self._final(entry, f"error: {type(exc).__name__}: {exc}", "done", is_error=True)
        if done.is_error:  # an image or file it returned was refused: nothing stored
            return self._final(entry, done.content, "done", is_error=True)
        return self._final(entry, done.content, "done", parts=done.parts)

    def _retry(self, entry: OutboxEntry, reason: str) -> OutboxOutcome:
        reason = clean(reason)
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
        parts: tuple[Part, ...] = (),
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
            error=clean(error or (content if is_error else "")) or None,
            parts=parts,
        )
