"""The runtime: the public entry point that ties store, scheduler, slices and dispatcher.

:class:`Runtime` wires the parts and offers the public API (admission, reads,
lifecycle). Running one slice — view budgets, compaction, the model, inline tools,
the failure policy — is :class:`~dormant.slices.runner.SliceRunner`'s; claiming is the
:class:`~dormant.slices.scheduler.Scheduler`'s, async tool calls the
:class:`~dormant.slices.dispatcher.Dispatcher`'s.

A store that cannot take a commit for now (locked, full, overloaded) pauses claiming;
work resumes once the store recovers. A damaged database stops the runtime:
:meth:`Runtime.run` raises :class:`~dormant.errors.SchemaError` saying what to do.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

import msgspec

from .agent import Agent
from .approvals.handle import ApprovalApi
from .config import Settings
from .errors import InvalidInput, SchemaError, UsageError
from .governor.gctune import gc_tuned
from .governor.loop import Governor, build_governor
from .journal.handles import JournalApi
from .journal.rules import CheckpointPolicy
from .memory import registers
from .memory.core import MemoryConfig, MemoryCore
from .memory.embedder import Embedder, EmbedderName, resolve_embedder
from .memory.facade import Memory
from .metrics import RuntimeStats
from .models.base import ModelEvent
from .parts import Extractor, Limits, PartInput, Text, store_parts
from .parts import budget as part_budget
from .records import Admission, Claim, Message, NewInput, Page, Priority, StoreStatus, Thread
from .retention.loop import RetentionLoop
from .retention.policy import RetentionPolicy
from .slices.dispatcher import Dispatcher
from .slices.memory import profile
from .slices.recovery import EndpointWatch
from .slices.runner import SliceRunner
from .slices.scheduler import Scheduler
from .store import Store, open_store, store_options
from .subject import DEFAULT_TSR_TURNS
from .tenants import scope as tenancy
from .tenants.scope import tenant_of
from .tools.blobs import ToolOutput, stored_output
from .tools.mcp.hub import McpHub
from .tools.pool import ToolThreads
from .urls import redact, remember

log = logging.getLogger("dormant.runtime")


class Runtime(ApprovalApi, JournalApi):
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
        memory_embedder: Embedder | EmbedderName | None = None,
    ) -> None:
        if not agents:
            raise UsageError("a runtime needs at least one agent")
        self.settings = settings or Settings.from_env()
        self._limits = Limits.of(self.settings)  # content parts (dormant.parts)
        #: text from images (OCR, ``DORMANT_OCR``: a missing tesseract is a UsageError
        #: here, at start-up) and the counters of both extractors (``extractor.stats``)
        self.extractor = Extractor.of(self.settings)
        part_budget.SHARED.limit = self.settings.part_bytes_in_flight  # the process's (dormant.parts.budget)
        if isinstance(store, str):
            store = open_store(store, **store_options(store, self.settings))
        self.store: Store = store
        #: the embedder of :attr:`memory`: "minilm" (the default, also None), "multilingual",
        #: "hashing", "none"
        self.memory_embedder = memory_embedder
        self._memory: Memory | None = None
        remember(store.url)  # its password is scrubbed from any error text shown later
        self.agents: dict[str, Agent] = {}
        for agent in agents:
            if agent.name in self.agents:
                raise UsageError(f"two agents are named {agent.name!r}")
            self.agents[agent.name] = agent
        self.default_agent = default_agent or agents[0].name
        if self.default_agent not in self.agents:
            raise UsageError(f"default agent {self.default_agent!r} is not defined")
        self.worker = self.settings.worker_id or f"{socket.gethostname()}:{os.getpid()}"
        self.stats = RuntimeStats()
        self.clock = time.time
        #: when :meth:`checkpoint` and the retention pass write state checkpoints
        #: (``checkpoint_*`` settings; replace to configure)
        self.checkpoints = CheckpointPolicy.from_settings(self.settings)
        #: what retention keeps of the threads of agents without a ``retention`` of their
        #: own (``retention`` and ``retention_*`` settings: by default nothing is deleted
        #: or cut; replace to configure)
        self.retention = RetentionPolicy.from_settings(self.settings)
        self._agent_retention: dict[str, RetentionPolicy] = {}
        for agent in self.agents.values():
            if isinstance(agent.retention, str):
                named = RetentionPolicy.from_settings(self.settings, agent.retention)
                self._agent_retention[agent.name] = named
            elif agent.retention is not None:  # a policy (Agent cannot check it: below retention)
                self._agent_retention[agent.name] = RetentionPolicy.of(agent.retention)
        #: the background retention pass while :meth:`run` runs (see :mod:`dormant.retention.loop`)
        self.retainer: RetentionLoop | None = None
        self.tool_threads = ToolThreads(self.settings.tool_threads)
        self.scheduler = Scheduler(
            self.store,
            self.run_slice,
            worker=self.worker,
            concurrency=self.settings.concurrency,
            lease_s=self.settings.lease_s,
            poll_s=self.settings.poll_s,
            agents=tuple(self.agents),
            tenant_slices=self.settings.tenant_slices,
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
            tool_threads=self.tool_threads,
            part_limits=self._limits,
        )
        #: the agents' MCP servers: one connection per server in this worker (:mod:`dormant.tools.mcp`)
        self.mcp = McpHub([(a.mcp, a.toolbox) for a in self.agents.values() if a.mcp])
        self.governor: Governor | None = build_governor(self.settings, self.scheduler, self.store, self.clock)
        if self.governor is not None:
            self.governor.handles.on_warn.append(self._on_memory_warn)
        self.runner = SliceRunner(
            self.store,
            self.agents,
            self.settings,
            self.stats,
            clock=self.clock,
            hold=self.scheduler.hold,
            on_commit=self.dispatcher.wake.set,
            on_damage=self._halt,
            tool_threads=self.tool_threads,
            governor=self.governor,
            # memory in the loop only for agents with a subject: the others never open it
            memory=(lambda: self.memory) if any(a.subject is not None for a in agents) else None,
        )
        # per agent: its model's window less its output, system prompt and tool schemas
        self.limits = self.runner.limits
        # a store shared by several processes (PostgreSQL) can hint that another
        # process made work ready; the poll stays the truth, the hint only cuts latency
        self.store.subscribe(self._on_store_hint)
        self._stop: asyncio.Event | None = None
        self._stop_requested = False
        self._opened = False
        self._fatal: SchemaError | None = None

    @property
    def on_change(self) -> Callable[[str], None] | None:
        """An optional observer (the HTTP server's event hub) called with a thread id after
        each slice of this process ends, committed or not. It runs on the slice's task: it
        must be quick (O(1) per subscriber) and must not raise."""
        return self.runner.on_change

    @on_change.setter
    def on_change(self, observer: Callable[[str], None] | None) -> None:
        self.runner.on_change = observer

    @property
    def on_delta(self) -> Callable[[str, ModelEvent], None] | None:
        """An optional observer called with ``(thread id, event)`` for each piece a model
        streams during a turn of this process (not compactions); same rules as
        :attr:`on_change`."""
        return self.runner.on_delta

    @on_delta.setter
    def on_delta(self, observer: Callable[[str, ModelEvent], None] | None) -> None:
        self.runner.on_delta = observer

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
        self.tool_threads.close()
        await self.mcp.close()
        if self._memory is not None:
            memory, self._memory = self._memory, None
            await memory.close()  # pending access counts, before the store closes
        if self._opened:
            await self.store.close()
            self._opened = False

    @property
    def memory(self) -> Memory:
        """Long-term memory in this runtime's store (``rt.memory.add / recall / get /
        history / forget / bind / rebind``; see docs/memory.md). Open runtime only.

        Built on first use over :meth:`Store.memory_rows` (PostgreSQL connects then, a
        blocking call); every operation runs in a worker thread, so the embedder loads
        and embeds off the event loop; ``rt.memory.status()`` reports its RSS."""
        if self._memory is None:
            if not self._opened:
                raise UsageError("open the runtime before using its memory")
            embedder = resolve_embedder(self.memory_embedder)
            config = MemoryConfig(
                binding_secret=self.settings.binding_secret,
                previous_binding_secret=self.settings.binding_secret_previous,
            )
            self._memory = Memory(MemoryCore(self.store.memory_rows(), embedder, config), store=self.store)
        return self._memory

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
        if self.mcp:
            await self.mcp.start()  # the model sees the servers' tools from the first slice on
        loops = [
            asyncio.create_task(self.mcp.run(self._stop), name="dormant-mcp"),
            asyncio.create_task(self.scheduler.run(self._stop), name="dormant-scheduler"),
            asyncio.create_task(self.dispatcher.run(self._stop), name="dormant-dispatcher"),
        ]
        if self.governor is not None:
            loops.append(asyncio.create_task(self.governor.run(self._stop), name="dormant-governor"))
        self.retainer = self.retention_loop()
        loops.append(asyncio.create_task(self.retainer.run(self._stop), name="dormant-retention"))
        watch = EndpointWatch(self.store, self.agents, self.scheduler.wake.set, self.settings.model_check_s)
        loops.append(asyncio.create_task(watch.run(self._stop), name="dormant-recovery"))
        loops.append(asyncio.create_task(self.sweep_approvals(self._stop), name="dormant-approvals"))
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
            self.retainer = None
        for task in loops:
            error = None if task.cancelled() else task.exception()
            if isinstance(error, SchemaError):
                self._halt(error)
            elif error is not None:
                raise error
        if self._fatal is not None:
            raise self._fatal

    def _on_memory_warn(self, transition: object) -> None:
        """The governor entered warn: start a retention pass now, one that also checkpoints
        every thread whose state changed (nothing when :meth:`run` is not running)."""
        if self.retainer is not None:
            self.retainer.poke(checkpoint=True)

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
                    if not await self.store.has_work(list(self.agents)):
                        break
        finally:
            self.stop()
            await runner

    # -- admission and reads ---------------------------------------------------------

    async def send(
        self,
        thread_id: str,
        text: str = "",
        *,
        dedup_key: str | None = None,
        agent: str | None = None,
        priority: Priority = Priority.P1,
        not_before: float = 0.0,
        identity: Mapping[str, str] | None = None,
        key: str | None = None,
        parts: Sequence[PartInput] = (),
    ) -> Admission:
        """Admit user text and ``parts`` (Text, Image, File: :mod:`dormant.parts`) to
        ``thread_id`` (created with ``agent`` if new); returns once durable. The same
        ``(thread_id, dedup_key)`` is admitted once (``key``: its earlier name; UsageError
        if both differ). ``identity`` (``{"phone": ..., "device": ...}``) names the sender:
        its binding key (:meth:`Memory.bind`) is the input's source and the thread's subject.
        """
        if key is not None and dedup_key is not None and key != dedup_key:
            raise UsageError("send takes dedup_key or its earlier name key, not two different keys")
        dedup_key = dedup_key if dedup_key is not None else key
        name = agent or self.default_agent
        if name not in self.agents:
            raise UsageError(f"unknown agent {name!r}")
        source = await self._bind(thread_id, identity) if identity else None
        if parts:  # all checked before a blob is stored, the blobs before the input
            text, stored = await store_parts(
                self.store, thread_id, [Text(text), *parts], self._limits, name, self.extractor
            )
        item = NewInput(
            thread_id=thread_id,
            kind="user",
            dedup_key=dedup_key or f"auto:{uuid.uuid4().hex}",
            content=text,
            priority=priority,
            not_before=not_before,
            agent=name,
            source=source,
            parts=stored if parts else (),
        )
        (admission,) = await self.admit([item])
        return admission

    async def registers(self, thread_id: str) -> dict[str, Any]:
        """A thread's registers: ``subject`` (its binding key or None),
        ``turn``, ``short_term`` (the entries of its last turns, key -> value) and
        ``long_term`` (its subject's profile, key -> value), from the committed journal
        and memory. NotFound for a missing thread."""
        regs = registers.read((await self.store.journal.recover(thread_id)).state)
        agent = self.agents.get((await self.store.get_thread(thread_id)).agent)
        turns = agent.subject.tsr_turns if agent is not None and agent.subject else DEFAULT_TSR_TURNS
        short = {
            k: msgspec.json.decode(v) for k, v in regs.entries if regs.turns.get(k, 0) > regs.turn - turns
        }
        long: dict[str, Any] = {}
        if regs.subject is not None:
            for key, value in await profile(await self.memory_for(thread_id), regs.subject):
                try:
                    long[key] = msgspec.json.decode(value)
                except msgspec.DecodeError:
                    long[key] = value
        return {"subject": regs.subject, "turn": regs.turn, "short_term": short, "long_term": long}

    async def rebind(self, thread_id: str, identity: Mapping[str, str]) -> str:
        """Move thread ``thread_id``'s subject to the binding key of ``identity`` (a
        device changed, say): the old key's memories move to the new one (audited;
        later reads and writes through the old key land on the new one); returns the new
        key. UsageError when the thread has no subject yet."""
        regs = registers.read((await self.store.journal.recover(thread_id)).state)
        if regs.subject is None:
            raise UsageError(f"thread {thread_id!r} has no subject to rebind; send with identity=")
        memory = await self.memory_for(thread_id)
        new = await memory.bind(identity)
        if new != regs.subject:
            await memory.rebind(regs.subject, new, actor=f"thread:{thread_id}")
        return new

    def retention_loop(self) -> RetentionLoop:
        """The background retention pass :meth:`run` supervises (:attr:`retention`, each
        agent's own ``retention``, :attr:`checkpoints`, the interval setting, :attr:`clock`)."""
        return RetentionLoop(
            self.store,
            self.retention,
            self.checkpoints,
            interval_s=self.settings.retention_interval_s,
            clock=lambda: self.clock(),
            policy_for=self.retention_for,
        )

    def retention_for(self, thread: Thread) -> RetentionPolicy:
        """The retention policy of ``thread``: its agent's ``retention`` when the agent is
        hosted here and has one (a name takes the ``retention_*`` counts of the
        settings), else :attr:`retention`."""
        return self._agent_retention.get(thread.agent, self.retention)

    async def memory_for(self, thread_id: str) -> Memory:
        """:attr:`memory` as the tenant of ``thread_id`` sees it (its subjects live there)."""
        return await self.memory.for_tenant(tenant_of(thread_id))

    async def _bind(self, thread_id: str, identity: Mapping[str, str]) -> str:
        return await (await self.memory_for(thread_id)).bind(identity)

    async def admit(self, items: Sequence[NewInput], *, tenant: str | None = None) -> list[Admission]:
        """Admit inputs durably; see :meth:`Store.admit` (``tenant``: the tenant every
        input's thread must belong to, see :mod:`dormant.tenants.scope`).

        Tool results are refused (:class:`InvalidInput`): they answer a call in the
        outbox, through the dispatcher or :meth:`post_tool_result`, so a stray result
        can never land without its call.
        """
        for item in items:
            if item.kind == "tool_result":
                raise InvalidInput("post tool results with post_tool_result(), not admit()")
        if self.governor is not None:
            self.governor.check_admission()  # Overloaded(retry_after) in a memory emergency
        admissions = await self.store.admit(items, tenant=tenant)
        self.scheduler.wake.set()
        return admissions

    async def post_tool_result(
        self,
        thread_id: str,
        call_id: str,
        content: ToolOutput,
        *,
        is_error: bool = False,
        tenant: str | None = None,
    ) -> Admission:
        """Answer an open async tool call from outside (e.g. a webhook); the first answer wins.

        ``content`` is text, bytes or a stream of bytes (see :data:`~dormant.tools.blobs.ToolOutput`);
        over ``Settings.blob_threshold_bytes`` it is stored as a blob of the thread and the
        result is its excerpt. Returns once the result is durable; a repeat (or an answer
        to a call the dispatcher already answered) returns ``duplicate=True``; an unknown
        call raises NotFound. See :meth:`Store.complete_call`.
        """
        tenancy.check([thread_id], tenant)  # before a blob of the result is stored for it
        text = await stored_output(self.store, thread_id, content, self.settings.blob_threshold_bytes)
        admission = await self.store.complete_call(thread_id, call_id, text, is_error=is_error, tenant=tenant)
        self.scheduler.wake.set()
        return admission

    async def history(
        self,
        thread_id: str,
        *,
        cursor: str | None = None,
        limit: int = 50,
        newest_first: bool = False,
        max_bytes: int | None = None,
        tenant: str | None = None,
    ) -> Page[Message]:
        """One page of a thread's history (at most 1,000 messages; with ``max_bytes``, at
        most that much content but one message at least)."""
        return await self.store.history(
            thread_id,
            cursor=cursor,
            limit=limit,
            newest_first=newest_first,
            max_bytes=max_bytes,
            tenant=tenant,
        )

    async def threads(
        self, *, cursor: str | None = None, limit: int = 50, tenant: str | None = None
    ) -> Page[Thread]:
        """One page of threads (of ``tenant`` only, when given)."""
        return await self.store.list_threads(cursor=cursor, limit=limit, tenant=tenant)

    async def thread(self, thread_id: str, *, tenant: str | None = None) -> Thread:
        """One thread's row."""
        return await self.store.get_thread(thread_id, tenant=tenant)

    async def status(self, tenant: str | None = None) -> StoreStatus:
        """Store-wide counts; with ``tenant``, that tenant's (see :meth:`Store.status`)."""
        return await self.store.status(tenant)

    async def delete_thread(self, thread_id: str, *, tenant: str | None = None) -> int:
        """Delete a thread and its descendants with their histories and unshared blobs;
        refused (InvalidInput) while one of them is running a slice. See
        :meth:`Store.delete_thread`."""
        return await self.store.delete_thread(thread_id, tenant=tenant)

    async def retry(self, thread_id: str, *, tenant: str | None = None) -> Thread:
        """Make a failed thread run again."""
        thread = await self.store.retry_thread(thread_id, tenant=tenant)
        self.scheduler.wake.set()
        return thread

    async def cancel_slices(self) -> int:
        """Stop claiming (:meth:`stop`) and cancel every slice running in this process (a
        prompt shutdown): each commits nothing, its lease is released at once and its inputs
        stay pending for the next slice, here or elsewhere. How many were cancelled."""
        self.stop()
        cancelled = 0
        for claim, _ in self.scheduler.slices():  # a copy: interrupting changes the running set
            cancelled += await self.interrupt(claim.thread_id)
        return cancelled

    async def interrupt(self, thread_id: str) -> bool:
        """Cancel the slice of ``thread_id`` running in this process; False when none runs here
        (a stored id: the server only names a thread the store found in the caller's tenant).

        The slice commits nothing (a commit already under way lands whole before the
        release, or is refused for its lost lease); its lease is released at once, so its
        inputs run again in the next slice, with any admitted since.
        """
        claim = await self.scheduler.cancel(thread_id)
        if claim is None:
            return False
        await self.store.release(claim)
        self.scheduler.wake.set()
        return True

    # -- one slice -------------------------------------------------------------------

    async def run_slice(self, claim: Claim) -> None:
        """Run one slice for ``claim``: load, decide, call, commit. Never raises."""
        await self.runner.run(claim)
