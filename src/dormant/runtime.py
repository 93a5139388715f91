"""The runtime: the public entry point that ties store, scheduler, slices and dispatcher.

A slice, as run here: load a bounded view → :class:`~dormant.slice.Turn` decides →
call the model (collected in a turn buffer) → run inline tools → loop (bounded) →
commit the plan in one transaction → forget. A failed slice commits nothing:
its inputs stay pending and the thread is retried after a backoff; after
``model_retries`` failures in a row the thread is marked failed, with the reason
in its ``error``, until ``dormant retry`` (:meth:`Runtime.retry`).

A store that cannot take the commit for now (locked by another process, full,
overloaded) is not the thread's fault: the slice is retried later without
counting a failure, and claiming pauses meanwhile, so work resumes by itself
once the store recovers. A damaged database stops the runtime: :meth:`Runtime.run`
raises :class:`~dormant.errors.SchemaError` saying what to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import socket
import time
import urllib.parse
import uuid
from collections.abc import Iterator, Sequence
from types import TracebackType

import msgspec

from . import blobs, compaction
from .agent import Agent
from .blobs import ToolOutput
from .config import Settings
from .dispatcher import STORE_RETRY_MAX_S, Dispatcher, backoff
from .errors import (
    InvalidInput,
    LeaseLost,
    ModelError,
    Overloaded,
    SchemaError,
    StoreFull,
    StoreLocked,
    UsageError,
)
from .metrics import RuntimeStats
from .models.base import ModelReply, ModelRequest, collect
from .records import (
    Admission,
    Claim,
    CommitPlan,
    Message,
    NewInput,
    Page,
    Priority,
    SliceLoad,
    StoreStatus,
    Summary,
    Thread,
    ViewLimits,
)
from .scheduler import Scheduler
from .slice import InlineCall, InlineResult, Turn
from .store import Store, open_store, store_options
from .tokens import DEFAULT_ENCODING, TokenCounter, count_text
from .tools import ToolContext

log = logging.getLogger("dormant.runtime")

#: A model that does not declare its window is assumed to have this one (tokens).
DEFAULT_WINDOW = 128_000
#: Tokens kept free besides the output reserve: per-message framing, rounding.
PROMPT_MARGIN = 64
#: The smallest history budget a runtime accepts.
MIN_VIEW_TOKENS = 256


def counted(plan: CommitPlan, counter: TokenCounter) -> CommitPlan:
    """``plan`` with the token count of each of its messages: counted once, as they are
    written, so no view ever counts history again. Only for limits that count tokens
    (:attr:`ViewLimits.counts_tokens`); else messages are stored uncounted (0).

    (Counting on a thread of its own, since tiktoken releases the GIL while it
    encodes, was measured slower: 1,085 against 1,872 turns/s on agent_scale, the
    GIL hand-offs costing more than the encoding.)
    """
    messages = tuple(msgspec.structs.replace(m, tokens=counter.message(m)) for m in plan.messages)
    return msgspec.structs.replace(plan, messages=messages)


#: CPython's youngest-generation GC threshold while a runtime runs (the default is 700).
#: Hundreds of slices in flight keep thousands of young container objects (coroutines,
#: futures, views) alive, so at the default each allocation burst re-traverses that
#: working set, and every tenth young collection cascades into a full one over the
#: whole heap: measured 15-18 % of the CPU of an agent_scale turn. Almost nothing a
#: slice allocates is cyclic garbage (refcounting frees it), so collecting less often
#: costs no memory to speak of.
GC_THRESHOLD = 50_000
_gc_users = 0  # runtimes running in this process; the first one tunes, the last one restores
_gc_saved: tuple[int, int, int] | None = None


@contextlib.contextmanager
def gc_tuned() -> Iterator[None]:
    """Raise the young-generation GC threshold to :data:`GC_THRESHOLD` while inside.

    Nested or concurrent uses share one setting; the last to leave restores what was
    set before the first entered. A threshold already above it is left alone.
    """
    global _gc_users, _gc_saved
    if _gc_users == 0:
        _gc_saved = gc.get_threshold()
        first, second, third = _gc_saved
        if 0 < first < GC_THRESHOLD:  # 0: collection is disabled, leave it so
            gc.set_threshold(GC_THRESHOLD, second, third)
    _gc_users += 1
    try:
        yield
    finally:
        _gc_users -= 1
        if _gc_users == 0 and _gc_saved is not None:
            gc.set_threshold(*_gc_saved)
            _gc_saved = None


def redact(url: str) -> str:
    """``url`` without its password, fit for messages and logs."""
    parts = urllib.parse.urlsplit(url)
    if not parts.password:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


class Runtime:
    """Hosts agents on a store. Use as ``async with Runtime(url, agents) as rt: ...``.

    ``store`` is a URL (see :func:`~dormant.store.open_store`) or an unopened store.
    Threads created by :meth:`send` without an explicit agent use ``default_agent``
    (the first agent when not given).
    """

    def __init__(
        self,
        store: str | Store,
        agents: Sequence[Agent],
        *,
        settings: Settings | None = None,
        default_agent: str | None = None,
    ) -> None:
        if not agents:
            raise UsageError("a runtime needs at least one agent")
        self.settings = settings or Settings.from_env()
        if isinstance(store, str):
            store = open_store(store, **store_options(store, self.settings))
        self.store: Store = store
        self.agents: dict[str, Agent] = {}
        for agent in agents:
            if agent.name in self.agents:
                raise UsageError(f"two agents are named {agent.name!r}")
            self.agents[agent.name] = agent
        self.default_agent = default_agent or agents[0].name
        if self.default_agent not in self.agents:
            raise UsageError(f"default agent {self.default_agent!r} is not defined")
        self.worker = self.settings.worker_id or f"{socket.gethostname()}:{os.getpid()}"
        # per agent: its model's window less its output, system prompt and tool schemas
        self.limits = {name: self._view_limits(agent) for name, agent in self.agents.items()}
        self._counters: dict[str, TokenCounter] = {}
        self.stats = RuntimeStats()
        self.clock = time.time
        self._names = frozenset(self.agents)
        self.scheduler = Scheduler(
            self.store,
            self.run_slice,
            worker=self.worker,
            concurrency=self.settings.concurrency,
            lease_s=self.settings.lease_s,
            poll_s=self.settings.poll_s,
        )
        self.dispatcher = Dispatcher(
            self.store,
            self.agents,
            self.stats,
            worker=self.worker,
            concurrency=self.settings.tool_concurrency,
            max_attempts=self.settings.tool_attempts,
            retry_base_s=self.settings.retry_base_s,
            retry_max_s=self.settings.retry_max_s,
            poll_s=self.settings.poll_s,
            max_result_bytes=self.settings.max_input_bytes,
            clock=self.clock,
            on_result=self.scheduler.wake.set,
            blob_threshold=self.settings.blob_threshold_bytes,
        )
        # a store shared by several processes (PostgreSQL) can hint that another
        # process made work ready; the poll stays the truth, the hint only cuts latency
        subscribe = getattr(self.store, "subscribe", None)
        if callable(subscribe):
            subscribe(self._on_store_hint)
        self._stop: asyncio.Event | None = None
        self._stop_requested = False
        self._opened = False
        self._fatal: SchemaError | None = None
        self._store_errors = 0  # slices in a row that the store could not take

    def _view_limits(self, agent: Agent) -> ViewLimits:
        """The view budget of ``agent``'s threads: what its model's window leaves for history.

        The system prompt and tool schemas are first bounded by their UTF-8 bytes (a
        token is at least one byte). When the byte cap alone then keeps every view
        within the budget (:attr:`ViewLimits.counts_tokens` is false), that bound is
        the budget and nothing loads the tokenizer; else they are counted.
        """
        model = agent.model
        encoding = getattr(model, "encoding", DEFAULT_ENCODING)
        window = getattr(model, "context_window", DEFAULT_WINDOW)
        reserved = getattr(model, "max_output_tokens", 4096) + PROMPT_MARGIN
        schemas = json.dumps(agent.toolbox.schemas)

        def budget(fixed: int) -> int:
            left = window - reserved - fixed
            return min(left, self.settings.view_tokens) if self.settings.view_tokens else left

        limits = ViewLimits(
            max_messages=self.settings.view_messages,
            max_bytes=self.settings.view_bytes,
            max_tokens=budget(len(agent.system_prompt.encode()) + len(schemas.encode())),
            encoding=encoding,
        )
        if limits.counts_tokens:
            fixed = count_text(agent.system_prompt, encoding) + count_text(schemas, encoding)
            limits = msgspec.structs.replace(limits, max_tokens=budget(fixed))
        if limits.max_tokens < MIN_VIEW_TOKENS:
            raise UsageError(
                f"agent {agent.name!r}: the model's window of {window} tokens leaves {limits.max_tokens} "
                f"for history once its system prompt, tools and output are counted; at least "
                f"{MIN_VIEW_TOKENS} needed"
            )
        return limits

    def _counter(self, encoding: str) -> TokenCounter:
        counter = self._counters.get(encoding)
        if counter is None:
            counter = self._counters[encoding] = TokenCounter(encoding)
        return counter

    def _on_store_hint(self, what: str) -> None:
        """Wake the scheduler (``threads``) or the dispatcher (``outbox``) early."""
        (self.dispatcher.wake if what == "outbox" else self.scheduler.wake).set()

    # -- lifecycle -------------------------------------------------------------------

    async def open(self) -> None:
        """Open the store (creating or migrating its schema)."""
        if not self._opened:
            await self.store.open()
            self._opened = True

    async def close(self) -> None:
        """Stop running loops and close the store."""
        self.stop()

        if self._opened:
            await self.store.close()
            self._opened = False

    async def __aenter__(self) -> Runtime:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def stop(self) -> None:
        """Ask :meth:`run` to stop claiming work; running slices finish.

        Called before :meth:`run` has started, it makes the next run return at once.
        """
        self._stop_requested = True
        if self._stop is not None:
            self._stop.set()

    async def run(self) -> None:
        """Run the scheduler and the dispatcher until :meth:`stop`.

        Store failures (locked, full) do not end it: work pauses and resumes by
        itself. A damaged database does: running slices and calls finish, then
        :class:`SchemaError` is raised with what to do.
        """
        await self.open()
        if self._stop is not None and not self._stop.is_set():
            raise UsageError("this runtime is already running")
        self._stop = asyncio.Event()
        self._fatal = None
        if self._stop_requested:
            self._stop.set()
        loops = [
            asyncio.create_task(self.scheduler.run(self._stop), name="dormant-scheduler"),
            asyncio.create_task(self.dispatcher.run(self._stop), name="dormant-dispatcher"),
        ]
        try:
            with gc_tuned():
                await asyncio.wait(loops, return_when=asyncio.FIRST_EXCEPTION)
                self._stop.set()  # if a loop ended with an error, the other one finishes its work
                await asyncio.wait(loops)
        except BaseException:
            for task in loops:
                task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
            raise
        finally:
            self._stop.set()
            self._stop_requested = False
        for task in loops:
            error = None if task.cancelled() else task.exception()
            if isinstance(error, SchemaError):
                self._halt(error)
            elif error is not None:
                raise error
        if self._fatal is not None:
            raise self._fatal

    def _halt(self, exc: SchemaError) -> None:
        """Stop the runtime because the database is damaged; :meth:`run` raises why."""
        if self._fatal is None:
            log.critical("store_damaged", extra={"error": str(exc)})
            url = redact(self.store.url)
            self._fatal = SchemaError(
                f"{exc} — dormant stopped. Stop every process using {url}, run "
                f"`dormant doctor --store {url}` to see what is damaged, and restore "
                "the database from a backup before starting again"
            )
            self._fatal.__cause__ = exc
        self.stop()

    async def run_until_idle(self, timeout: float | None = None) -> None:
        """Run until no input is ready, no slice runs and no tool call is open.

        Timers due later do not keep it running. Raises ``TimeoutError`` after
        ``timeout`` seconds.
        """
        runner = asyncio.create_task(self.run())
        try:
            async with asyncio.timeout(timeout):
                while not runner.done():
                    await asyncio.sleep(0.005)
                    if self.scheduler.active or self.dispatcher.active:
                        continue
                    if not await self.store.has_work():
                        break
        finally:
            self.stop()
            await runner

    # -- admission and reads ---------------------------------------------------------

    async def send(
        self,
        thread_id: str,
        text: str,
        *,
        key: str | None = None,
        agent: str | None = None,
        priority: Priority = Priority.P1,
        not_before: float = 0.0,
    ) -> Admission:
        """Admit user text to ``thread_id`` (created with ``agent`` if new).

        Returns once the input is durable. Pass ``key`` to make the send idempotent:
        the same ``(thread_id, key)`` is admitted once, whatever the retries.
        """
        name = agent or self.default_agent
        if name not in self.agents:
            raise UsageError(f"unknown agent {name!r}")
        item = NewInput(
            thread_id=thread_id,
            kind="user",
            dedup_key=key or f"auto:{uuid.uuid4().hex}",
            content=text,
            priority=priority,
            not_before=not_before,
            agent=name,
        )
        (admission,) = await self.admit([item])
        return admission

    async def admit(self, items: Sequence[NewInput]) -> list[Admission]:
        """Admit inputs durably; see :meth:`Store.admit`.

        Tool results are refused (:class:`InvalidInput`): they answer a call in the
        outbox, through the dispatcher or :meth:`post_tool_result`, so a stray result
        can never land without its call.
        """
        for item in items:
            if item.kind == "tool_result":
                raise InvalidInput("post tool results with post_tool_result(), not admit()")
        admissions = await self.store.admit(items)
        self.scheduler.wake.set()
        return admissions

    async def post_tool_result(
        self, thread_id: str, call_id: str, content: ToolOutput, *, is_error: bool = False
    ) -> Admission:
        """Answer an open async tool call from outside (e.g. a webhook); the first answer wins.

        ``content`` is text, bytes or a stream of bytes (see :data:`~dormant.blobs.ToolOutput`);
        over ``Settings.blob_threshold_bytes`` it is stored as a blob of the thread and the
        result is its excerpt. Returns once the result is durable; a repeat (or an answer
        to a call the dispatcher already answered) returns ``duplicate=True``; an unknown
        call raises NotFound. See :meth:`Store.complete_call`.
        """
        text = await blobs.stash(self.store, thread_id, content, self.settings.blob_threshold_bytes)
        admission = await self.store.complete_call(thread_id, call_id, text, is_error=is_error)
        self.scheduler.wake.set()
        return admission

    async def history(
        self, thread_id: str, *, cursor: str | None = None, limit: int = 50, newest_first: bool = False
    ) -> Page[Message]:
        """One page of a thread's history (at most 1,000 messages)."""
        return await self.store.history(thread_id, cursor=cursor, limit=limit, newest_first=newest_first)

    async def threads(self, *, cursor: str | None = None, limit: int = 50) -> Page[Thread]:
        """One page of threads."""
        return await self.store.list_threads(cursor=cursor, limit=limit)

    async def thread(self, thread_id: str) -> Thread:
        """One thread's row."""
        return await self.store.get_thread(thread_id)

    async def status(self) -> StoreStatus:
        """Store-wide counts."""
        return await self.store.status()

    async def delete_thread(self, thread_id: str) -> int:
        """Delete a thread and its descendants with their histories and unshared blobs;
        refused (InvalidInput) while one of them is running a slice. See
        :meth:`Store.delete_thread`."""
        return await self.store.delete_thread(thread_id)

    async def retry(self, thread_id: str) -> Thread:
        """Make a failed thread run again."""
        thread = await self.store.retry_thread(thread_id)
        self.scheduler.wake.set()
        return thread

    # -- one slice -------------------------------------------------------------------

    async def run_slice(self, claim: Claim) -> None:
        """Run one slice for ``claim``: load, decide, call, commit. Never raises."""
        started = time.perf_counter()
        try:
            await self._slice(claim)
        except LeaseLost:
            self.stats.leases_lost += 1
            log.warning("slice_lease_lost", extra={"thread_id": claim.thread_id})
        except asyncio.CancelledError:
            self.stats.leases_lost += 1
            raise
        except SchemaError as exc:
            self._halt(exc)
        except (StoreFull, StoreLocked, Overloaded) as exc:
            self.stats.slice_failures += 1
            await self._store_unavailable(claim, exc)
        except Exception as exc:
            self.stats.slice_failures += 1
            await self._failed(claim, exc)
        else:
            self._store_errors = 0
            self.stats.slices += 1
            self.stats.slice_latency.add(time.perf_counter() - started)
            self.dispatcher.wake.set()

    async def _slice(self, claim: Claim) -> None:
        agent = self.agents.get(claim.agent)
        if agent is None:
            raise UsageError(f"thread {claim.thread_id!r} runs unknown agent {claim.agent!r}")
        limits = self.limits[agent.name]
        load = await self.store.load_slice(claim, limits)
        # only limits that count tokens load a tokenizer (see ViewLimits.counts_tokens)
        counter = self._counter(limits.encoding) if limits.counts_tokens else None
        summary = None
        if compaction.due(load, limits, self.settings.compaction_share):
            load, summary = await self._compact(load, agent, limits, counter)
        turn = Turn(
            load,
            token=claim.token,
            system=agent.system_prompt,
            tools=agent.toolbox,
            max_rounds=self.settings.max_rounds,
            now=self.clock(),
            summary=summary,
        )
        while turn.wants_model:
            reply = await self._complete(agent, turn.request())
            inline = turn.on_reply(reply)
            if inline:
                turn.on_results([await self._inline(call, load.thread, agent) for call in inline])
        plan = turn.plan()
        await self.store.commit_slice(plan if counter is None else counted(plan, counter))

    async def _complete(self, agent: Agent, request: ModelRequest) -> ModelReply:
        """One model call under the model timeout."""
        try:
            async with asyncio.timeout(self.settings.model_timeout_s):
                reply = await collect(agent.model.stream(request))
        except TimeoutError:
            timeout = self.settings.model_timeout_s
            raise ModelError(f"the model did not answer within {timeout:g}s") from None
        self.stats.completions += 1
        if reply.cut:  # issue 14: the output cap cut the reply; kept, but said so
            log.warning(
                "model_reply_cut thread=%s: the reply hit the output cap (finish_reason length)",
                request.thread_id,
                extra={"thread_id": request.thread_id},
            )
        return reply

    async def _compact(
        self, load: SliceLoad, agent: Agent, limits: ViewLimits, counter: TokenCounter | None
    ) -> tuple[SliceLoad, Summary | None]:
        """Summarize the older part of ``load``'s view; on failure, ``load`` unchanged.

        A failed compaction costs the slice nothing: the thread goes on with its view
        (still bounded by the budget) and compaction is tried again on its next slice.
        """
        keep = self.settings.compaction_keep
        index = compaction.cut_index(
            load.view[load.inherited :],
            int(limits.max_tokens * keep),
            int(limits.max_bytes * keep),
            int(limits.max_messages * keep),  # else a view bounded only by its message cap never compacts
        )
        if index is None:
            return load, None
        prompt = agent.compaction_prompt or compaction.DEFAULT_PROMPT
        max_words = max(50, getattr(agent.model, "max_output_tokens", 4096) * 2 // 3)
        try:
            reply = await self._complete(agent, compaction.request(load, index, prompt, max_words))
            if not reply.text.strip():
                raise ModelError("the model returned an empty summary", retryable=False)
        except Exception as exc:
            self.stats.compaction_failures += 1
            error = f"{type(exc).__name__}: {exc}"
            log.warning(
                "compaction_failed thread=%s: %s",  # readable with no logging set up
                load.thread.id,
                error,
                extra={"thread_id": load.thread.id, "error": error},
            )
            return load, None
        self.stats.compactions += 1
        tokens = counter.count("system", reply.text) if counter is not None else 0
        new = compaction.summary(load, index, reply.text, tokens, self.clock())
        return compaction.compacted(load, index, new), new

    async def _inline(self, call: InlineCall, thread: Thread, agent: Agent) -> InlineResult:
        self.stats.inline_calls += 1
        ctx = ToolContext(
            thread_id=thread.id,
            call_id=call.call.id,
            agent=agent.name,
            message_seq=call.message_seq,
            parent_id=thread.parent_id,
            now=self.clock(),
            agents=self._names,
            blobs=self.store,
            blob_threshold=self.settings.blob_threshold_bytes,
            max_spawn_depth=agent.max_spawn_depth,  # issue 14: bounded spawn_thread
            max_children=agent.max_children,
            children=call.children,
        )
        try:
            async with asyncio.timeout(call.spec.timeout):
                output = await call.spec.run(call.args, ctx)
                # a large output goes to the store now (outside the slice's transaction: a
                # slice that fails leaves an unused reference, collected with the thread)
                content = await blobs.stash(self.store, thread.id, output, ctx.blob_threshold)
        except TimeoutError:
            return InlineResult(call=call.call, content=f"error: timed out after {call.spec.timeout:g}s")
        except Exception as exc:  # the model hears about a tool's failure
            return InlineResult(call=call.call, content=f"error: {type(exc).__name__}: {exc}")
        return InlineResult(
            call=call.call,
            content=content,
            threads=tuple(ctx.threads),
            admissions=tuple(ctx.admissions),
        )

    async def _failed(self, claim: Claim, exc: BaseException) -> None:
        """Release a failed slice's lease with a backoff, or mark the thread failed."""
        reason = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, ModelError) and exc.outage:  # issue 14: an endpoint outage is not a failure
            await self._model_outage(claim, exc, reason)
            return
        try:
            thread = await self.store.get_thread(claim.thread_id)
            failures = thread.failures + 1
            permanent = isinstance(exc, UsageError) or (isinstance(exc, ModelError) and not exc.retryable)
            fail = permanent or failures > self.settings.model_retries
            delay = backoff(failures, self.settings.retry_base_s, self.settings.retry_max_s)
            if isinstance(exc, ModelError) and exc.retry_after:
                delay = max(delay, exc.retry_after)
            log.warning(
                "slice_failed thread=%s failed=%s: %s",  # readable with no logging set up
                claim.thread_id,
                fail,
                reason,
                extra={"thread_id": claim.thread_id, "error": reason, "failed": fail},
            )
            await self.store.release(claim, retry_at=self.clock() + delay, error=reason, fail=fail)
        except Exception as store_exc:
            # the lease will expire by itself; the inputs are still pending
            log.error(
                "slice_release_failed",
                extra={"thread_id": claim.thread_id, "error": f"{type(store_exc).__name__}: {store_exc}"},
            )

    async def _model_outage(self, claim: Claim, exc: ModelError, reason: str) -> None:
        """The model endpoint is down or its circuit breaker open (issue 14): the thread
        waits ``retry_after`` (at least the first backoff) without counting a failure."""
        delay = max(exc.retry_after or 0.0, self.settings.retry_base_s)
        log.warning(
            "slice_model_outage thread=%s retry_in=%.1fs: %s",
            claim.thread_id,
            delay,
            reason,
            extra={"thread_id": claim.thread_id, "error": reason, "retry_in_s": round(delay, 3)},
        )
        try:
            await self.store.release(claim, retry_at=self.clock() + delay)
        except Exception as release_exc:
            log.error(
                "slice_release_failed",
                extra={"thread_id": claim.thread_id, "error": f"{type(release_exc).__name__}: {release_exc}"},
            )

    async def _store_unavailable(self, claim: Claim, exc: BaseException) -> None:
        """The store could not take the slice (locked, full, overloaded): not the thread's fault.

        The thread's failure count is left alone; it is retried after a backoff that
        grows while the store keeps failing, and claiming pauses as long.
        """
        self._store_errors += 1
        delay = backoff(min(self._store_errors, 16), self.settings.retry_base_s, STORE_RETRY_MAX_S)
        if isinstance(exc, Overloaded):
            delay = max(delay, exc.retry_after)
        self.scheduler.hold(delay)
        error = f"{type(exc).__name__}: {exc}"
        log.warning(
            "slice_store_unavailable",
            extra={"thread_id": claim.thread_id, "error": error, "retry_in_s": round(delay, 3)},
        )
        try:
            await self.store.release(claim, retry_at=self.clock() + delay)
        except Exception as release_exc:
            log.error(
                "slice_release_failed",
                extra={"thread_id": claim.thread_id, "error": f"{type(release_exc).__name__}: {release_exc}"},
            )
