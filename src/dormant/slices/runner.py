"""Running one slice: load a bounded view, compact, call the model, run inline tools, commit.

A slice, as run here: load a bounded view → :class:`~dormant.slices.step.Turn` decides →
call the model (collected in a turn buffer) → run inline tools → loop (bounded) →
commit the plan in one transaction → forget. A failed slice commits nothing: its
inputs stay pending and the thread is retried after a backoff; after
``model_retries`` failures in a row the thread is marked failed, with the reason in
its ``error``, until ``dormant retry``. Attempts are counted when a slice is claimed
(:attr:`~dormant.records.Claim.attempts`), so a slice that kills its worker counts
too: a thread claimed more than ``model_retries + 1`` times without a commit is
marked failed without running again (a poison pill never runs without bound).
A prompt the server refuses as over its window is tried once more within half the
view budget before it counts; a model endpoint that is down (``ModelError.outage``)
makes the thread wait, uncounted, with the reason and the time in its row
(``wait_reason``, ``wait_until``) for ``dormant status``. A reply the server refused
(content filter, refusal: ``ModelError(kind="refused")``) is never stored as an
answer: the slice fails for good, its input stays pending, the reason is the
thread's ``error``.

What the server said about each reply is kept: its usage on the assistant message and
summed on the thread (compaction calls included), its ``finish_reason`` (a reply cut
by the output cap is marked cut, and with the agent's ``max_continuations`` continued
in the same slice), its reasoning apart from the answer.

A store that cannot take the commit for now (locked by another process, full,
overloaded) is not the thread's fault: the slice is retried later without counting a
failure, and claiming pauses meanwhile. A damaged database is reported to the
runtime, which stops.

Text from outside (model replies, tool outputs, error messages) is cleaned
(:func:`~dormant.text.clean`) before it reaches the store, so both backends store
the same thing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Protocol

import msgspec

from .. import logs
from ..agent import Agent
from ..config import Settings
from ..errors import RETRY_LATER, LeaseLost, ModelError, Overloaded, SchemaError, UsageError
from ..memory import facts
from ..memory.facade import Memory
from ..metrics import RuntimeStats
from ..models.base import MAX_REPLY_BYTES, ModelEvent, ModelReply, ModelRequest, collect
from ..parts import Limits
from ..records import Claim, SliceLoad, Summary, Thread, Usage, ViewLimits
from ..store.base import Store
from ..text import clean
from ..tokens import TokenCounter
from ..tools import external
from ..tools.pool import ToolThreads
from ..tools.results import stored_result
from ..tools.spec import ToolContext, timeout_reason
from ..view import budget, builder
from ..view import ratio as ratio_rules
from ..view.pages import PagePolicy
from ..view.ratio import TokenRatios
from . import compaction
from .deadline import Deadline
from .landing import land
from .memory import LoopMemory, Prepared, SubjectMemory
from .replies import (
    MAX_SCALED,
    clean_reply,
    counted,
    crashed_out,
    failures_of,
    fill_counts,
    kept_ratio,
    tapped,
)
from .retry import STORE_RETRY_MAX_S, backoff, capped
from .step import InlineCall, InlineResult, Turn

__all__ = ["SliceRunner", "clean_reply", "counted", "crashed_out", "failures_of", "tapped"]

log = logging.getLogger("dormant.runtime")


class SliceBoundary(Protocol):
    """What a slice boundary tells the RSS governor (:class:`dormant.governor.loop.Governor`)."""

    def sample_if_due(self) -> object:
        """Sample RSS now unless a sample was taken very recently."""
        ...


class SliceRunner:
    """Runs slices for claims: the only place a slice does I/O.

    ``hold(seconds)`` pauses claiming (the store cannot commit now), ``on_commit()`` is
    called after each committed slice, ``on_damage(exc)`` when the database is damaged.
    ``governor`` (the RSS governor, if any) samples RSS at every slice boundary.
    Every log record a slice writes carries its thread and slice ids (:func:`dormant.logs.bind`).
    """

    def __init__(
        self,
        store: Store,
        agents: Mapping[str, Agent],
        settings: Settings,
        stats: RuntimeStats,
        *,
        clock: Callable[[], float],
        hold: Callable[[float], None],
        on_commit: Callable[[], None],
        on_damage: Callable[[SchemaError], None],
        tool_threads: ToolThreads | None = None,
        governor: SliceBoundary | None = None,
        memory: Callable[[], Memory] | None = None,
    ) -> None:
        self.store = store
        self.agents = agents
        self.settings = settings
        self.stats = stats
        self.clock = clock
        self.hold = hold
        self.on_commit = on_commit
        self.on_damage = on_damage
        self.tool_threads = tool_threads
        self.governor = governor
        self.part_limits = Limits.of(settings)  # images and files tools return
        # per agent: its model's window less its output, system prompt and tool schemas
        #: per agent: the page manager's policy (its own, else from the settings)
        self.pages = {
            name: agent.pages or PagePolicy.from_settings(settings) for name, agent in agents.items()
        }
        #: per agent: the view's limits, less the memories and state sections of an agent
        #: with a subject (the page manager reserves their shares of the budget)
        full = {name: budget.limits_for(agent, settings) for name, agent in agents.items()}
        self.limits = {
            name: self.pages[name].view_limits(full[name], subject=agent.subject is not None)
            for name, agent in agents.items()
        }
        #: per agent: tokens of its memories and state sections (0, 0 without a subject)
        self.sections = {
            name: self.pages[name].sections(full[name], subject=agent.subject is not None)
            for name, agent in agents.items()
        }
        #: memory in the loop, for agents with a subject; None: no memory here
        self.loop_memory = LoopMemory(store, memory) if memory is not None else None
        self._counters: dict[str, TokenCounter] = {}
        #: per model: its tokens against dormant's count, learned from the server (:mod:`dormant.view.ratio`)
        self.ratios = TokenRatios()
        #: (agent, quantized ratio) -> (limits, sections): budgets under a learned ratio, bounded
        self._scaled: dict[tuple[str, float], tuple[ViewLimits, tuple[int, int]]] = {}
        self._names = frozenset(agents)
        self._store_errors = 0  # slices in a row that the store could not take
        #: optional observers (see :attr:`dormant.runtime.Runtime.on_change`, ``on_delta``)
        self.on_change: Callable[[str], None] | None = None
        self.on_delta: Callable[[str, ModelEvent], None] | None = None

    def _counter(self, encoding: str) -> TokenCounter:
        counter = self._counters.get(encoding)
        if counter is None:
            counter = self._counters[encoding] = TokenCounter(encoding)
        return counter

    def learns(self, agent: Agent) -> bool:
        """Whether ``agent``'s model learns its token ratio from the server's usage."""
        return bool(getattr(agent.model, "learns_tokens", False))

    def limits_at(self, agent: Agent, ratio: float) -> tuple[ViewLimits, tuple[int, int]]:
        """The view limits and section shares of ``agent`` under token ``ratio`` (rounded up
        to a step; at most :data:`MAX_SCALED` budgets are kept). A ratio whose budget would
        be under the minimum gets the minimum (the server's refusal says the rest)."""
        step = ratio_rules.quantize(ratio)
        if step <= 1.0:
            return self.limits[agent.name], self.sections[agent.name]
        key = (agent.name, step)
        hit = self._scaled.get(key)
        if hit is not None:
            return hit
        policy = self.pages[agent.name]
        subject = agent.subject is not None
        try:
            full = budget.limits_for(agent, self.settings, step)
        except UsageError:
            base = self.limits[agent.name]
            full = msgspec.structs.replace(base, max_tokens=budget.MIN_VIEW_TOKENS)
        made = (policy.view_limits(full, subject=subject), policy.sections(full, subject=subject))
        if len(self._scaled) >= MAX_SCALED:
            self._scaled.pop(next(iter(self._scaled)))
        self._scaled[key] = made
        return made

    async def run(self, claim: Claim) -> None:
        """Run one slice for ``claim``: load, decide, call, commit. Never raises
        (but a cancelled slice, whose lease was lost, is cancelled)."""
        started = time.perf_counter()
        logs.bind(thread_id=claim.thread_id, slice_id=claim.token)  # on every record of this slice
        if self.governor is not None:
            self.governor.sample_if_due()  # a slice boundary
        if crashed_out(claim, self.settings.model_retries):
            await self._poisoned(claim)
            return
        try:
            await self._slice(claim)
        except LeaseLost:
            self.stats.leases_lost += 1
            log.warning("slice_lease_lost", extra={"thread_id": claim.thread_id})
        except asyncio.CancelledError:
            self.stats.leases_lost += 1
            raise
        except SchemaError as exc:
            self.on_damage(exc)
        except RETRY_LATER as exc:
            self.stats.slice_failures += 1
            await self._store_unavailable(claim, exc)
        except Exception as exc:
            self.stats.slice_failures += 1
            await self._failed(claim, exc)
            self._changed(claim.thread_id)
        else:
            self._store_errors = 0
            self.stats.slices += 1
            self.stats.slice_latency.add(time.perf_counter() - started)
            self.on_commit()
            self._changed(claim.thread_id)

    def _changed(self, thread_id: str) -> None:
        if self.on_change is not None:
            self.on_change(thread_id)

    async def _slice(self, claim: Claim) -> None:
        agent = self.agents.get(claim.agent)
        if agent is None:
            raise UsageError(f"thread {claim.thread_id!r} runs unknown agent {claim.agent!r}")
        ratio = self.ratios.get(agent.model.name) if self.learns(agent) else 1.0
        limits, sections = self.limits_at(agent, ratio)
        try:
            await self._attempt(claim, agent, limits, sections, ratio)
        except ModelError as exc:
            if not exc.context_overflow:
                raise
            # the server counted the prompt over its window; once more with half
            # the view (compacted if messages drop out), and only then is it a failure
            self.stats.context_overflows += 1
            log.warning(
                "slice_context_overflow thread=%s: retrying once with a smaller view: %s",
                claim.thread_id,
                exc,
                extra={"thread_id": claim.thread_id, "error": clean(str(exc))},
            )
            if self.learns(agent):  # the refusal taught the ratio: the retry is within it
                ratio = max(ratio, self.ratios.get(agent.model.name))
                limits, sections = self.limits_at(agent, ratio)
            await self._attempt(claim, agent, compaction.after_overflow(limits), sections, ratio)

    async def _attempt(
        self,
        claim: Claim,
        agent: Agent,
        limits: ViewLimits,
        sections: tuple[int, int] | None = None,
        ratio: float = 1.0,
    ) -> None:
        """Load a view within ``limits``, run the turn, commit it."""
        load = await self.store.load_slice(claim, limits)
        learns = self.learns(agent)
        if learns:
            if load.state is None:  # not on the row: the journal has it (then the row will)
                recovered = await self.store.journal.recover(claim.thread_id)
                load = msgspec.structs.replace(load, state=dict(recovered.state))
            kept = ratio_rules.stored_ratio(load.state, agent.model.name)
            if ratio_rules.quantize(kept) > ratio_rules.quantize(ratio):
                # this thread taught a larger ratio before (another process, a restart)
                ratio = self.ratios.raise_to(agent.model.name, kept)
                limits, sections = self.limits_at(agent, ratio)
                load = await self.store.load_slice(claim, limits)
        if sections is None:
            sections = self.sections[agent.name]
        # a tokenizer only where bytes cannot prove the next views fit (builder.needs_counts)
        counter = self._counter(limits.encoding) if builder.needs_counts(load, limits) else None
        prepared: Prepared | None = None
        if agent.subject is not None and self.loop_memory is not None:
            started = time.perf_counter()
            prepared = await self.loop_memory.prepare(load, agent.subject, sections, agent.name)
            self.stats.recall_latency.add(time.perf_counter() - started)
        summary = None
        spent: Usage | None = None  # by the compaction call
        found: tuple[facts.Fact, ...] = ()
        if compaction.due(load, limits, self.pages[agent.name].compact_at):
            load, summary, spent, found = await self._compact(load, agent, limits, counter)
        turn_limits = limits
        client_tools = external.decode(load.thread.client_tools)
        if client_tools:  # within the prompt budget like the agent's own schemas
            turn_limits = external.within(limits, client_tools)
            load = msgspec.structs.replace(load, usage=None)  # weighed again under those limits
        turn = Turn(
            load,
            token=claim.token,
            system=agent.system_prompt,
            tools=agent.toolbox,
            max_rounds=self.settings.max_rounds,
            now=self.clock(),
            summary=summary,
            limits=turn_limits,
            usage=spent,
            sections=prepared.sections if prepared is not None else "",
            external=client_tools,
            blobs=self.store,  # the bytes of the view's images and files, read per request
        )
        handle = prepared.handle if prepared is not None else None
        while turn.wants_model:
            reply = await self._complete(agent, turn.request(), live=True)
            reply = await self._continue(agent, turn, reply)
            inline = turn.on_reply(reply)
            if inline:
                turn.on_results([await self._inline(call, load.thread, agent, handle) for call in inline])
        plan = turn.plan()
        if prepared is not None and self.loop_memory is not None:
            plan = prepared.finish(plan, found)  # registers and memories: in this transaction
            plan, dropped = await self.loop_memory.seal(prepared, plan)
            self.stats.memories_dropped += dropped
        if learns:
            plan = kept_ratio(plan, load, agent.model.name, self.ratios.get(agent.model.name))
        if counter is not None:
            await fill_counts(limits.encoding, [m.content for m in plan.messages])
            plan = counted(plan, counter)
        await land(self.store.commit_slice(plan))  # landed: done, even if cancelled meanwhile

    async def _complete(self, agent: Agent, request: ModelRequest, *, live: bool = False) -> ModelReply:
        """One model call under the model timeout; the reply cleaned. A ``live`` one (a
        turn's, not a compaction's) is shown to :attr:`on_delta` as it streams."""
        started = time.perf_counter()
        first, gap = self.settings.model_timeout_s, self.settings.model_stream_timeout_s
        deadline = Deadline(first, gap)
        try:
            with deadline:
                stream = agent.model.stream(request)
                if live and self.on_delta is not None:
                    stream = tapped(stream, request.thread_id, self.on_delta)
                reply = await collect(stream, on_piece=deadline.piece)
        except TimeoutError:
            raise ModelError(deadline.reason(), retryable=True) from None
        except ModelError as exc:
            if exc.kind == "refused":
                self.stats.refusals += 1
            if exc.context_overflow and self.learns(agent):
                real = ratio_rules.overflow_tokens(str(exc))
                if real is not None:
                    self._observe(agent, request, real)
            raise
        if reply.usage is not None and reply.usage.prompt > 0 and self.learns(agent):
            self._observe(agent, request, reply.usage.prompt)
        self.stats.completions += 1
        self.stats.model_latency.add(time.perf_counter() - started)
        if reply.usage is not None:
            self.stats.prompt_tokens += reply.usage.prompt
            self.stats.completion_tokens += reply.usage.completion
            self.stats.cached_tokens += reply.usage.cached
        if reply.cut:  # the output cap cut the reply; kept, marked, maybe continued
            self.stats.replies_cut += 1
            log.warning(
                "model_reply_cut thread=%s: the reply hit the output cap (finish_reason length)",
                request.thread_id,
                extra={"thread_id": request.thread_id},
            )
        return clean_reply(reply)

    def _observe(self, agent: Agent, request: ModelRequest, real: int) -> None:
        """Teach the model's token ratio: the server counted ``real`` prompt tokens for ``request``."""
        model = agent.model
        overhead = getattr(getattr(model, "chat_overhead", None), "message", 3)
        estimated = ratio_rules.estimate(request, self._counter(model.encoding), overhead)
        before, after = self.ratios.get(model.name), self.ratios.observe(model.name, real, estimated)
        if ratio_rules.quantize(after) > ratio_rules.quantize(before):
            log.info(
                "model_token_ratio thread=%s model=%s ratio=%.2f (server counted %d, dormant %d)",
                request.thread_id,
                model.name,
                after,
                real,
                estimated,
                extra={"thread_id": request.thread_id, "ratio": round(after, 3)},
            )

    async def _continue(self, agent: Agent, turn: Turn, reply: ModelReply) -> ModelReply:
        """``reply`` continued while the output cap cut it, at most the agent's
        ``max_continuations`` times; a reply with tool calls is never
        continued (its arguments are the model's to redo)."""
        for _ in range(agent.max_continuations):
            if not reply.cut or reply.tool_calls or len(reply.text) + len(reply.reasoning) >= MAX_REPLY_BYTES:
                break
            self.stats.continuations += 1
            more = await self._complete(agent, turn.continuation(reply), live=True)
            reply = reply.then(more)
        return reply

    async def _compact(
        self, load: SliceLoad, agent: Agent, limits: ViewLimits, counter: TokenCounter | None
    ) -> tuple[SliceLoad, Summary | None, Usage | None, tuple[facts.Fact, ...]]:
        """Summarize the older part of ``load``'s view; on failure, ``load`` unchanged.
        Also the usage of the compaction call (None when it failed or sent none: a failed
        call's tokens are not known).

        What is kept verbatim is the page manager's (:meth:`PagePolicy.keep_limits`).
        For an agent that extracts facts, the same call returns them (:mod:`dormant.memory.facts`);
        they come back with the tool results the policy moves out of the summarized part.
        A failed compaction costs the slice nothing: the thread goes on with its view
        (still bounded by the budget) and compaction is tried again on its next slice.
        """
        policy = self.pages[agent.name]
        keep = policy.keep_limits(limits)
        own = load.view[load.inherited :]
        index = compaction.cut_index(
            own,
            keep.tokens,
            keep.bytes,
            keep.messages,
            weight=keep.weight,
            cap_tokens=keep.cap_tokens,
            cap_bytes=keep.cap_bytes,
        )
        if index is None:
            return load, None, None, ()
        prompt = agent.compaction_prompt or compaction.DEFAULT_PROMPT
        max_words = max(50, getattr(agent.model, "max_output_tokens", 4096) * 2 // 3)
        # facts become memory records of the thread's subject: none without one
        extract = agent.subject is not None and policy.extract_facts is not False
        extra = facts.instruction() if extract else ""
        try:
            reply = await self._complete(agent, compaction.request(load, index, prompt, max_words, extra))
            parsed = facts.split(reply.text) if extract else facts.Extraction(summary=reply.text)
            if not parsed.summary.strip():
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
            return load, None, None, ()
        self.stats.compactions += 1
        if parsed.problem is not None:
            log.warning(
                "compaction_facts_unreadable thread=%s: %s",
                load.thread.id,
                parsed.problem,
                extra={"thread_id": load.thread.id, "error": parsed.problem},
            )
        found = parsed.facts + policy.moved_out(own[: index + 1]) if agent.subject is not None else ()
        self.stats.facts_found += len(found)
        tokens = 0
        if counter is not None:
            await fill_counts(limits.encoding, [parsed.summary])
            tokens = counter.count("system", parsed.summary)
        new = compaction.summary(load, index, parsed.summary, tokens, self.clock())
        return compaction.compacted(load, index, new), new, reply.usage, found

    async def _inline(
        self, call: InlineCall, thread: Thread, agent: Agent, memory: SubjectMemory | None = None
    ) -> InlineResult:
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
            tool_threads=self.tool_threads,
            max_spawn_depth=agent.max_spawn_depth,  # bounded spawn_thread
            max_children=agent.max_children,
            children=call.children,
            memory=memory,
        )
        started = time.perf_counter()
        logs.bind(call_id=call.call.id)
        try:
            async with asyncio.timeout(call.spec.timeout):
                output = await call.spec.run(call.args, ctx)
                # a large output goes to the store now (outside the slice's transaction: a
                # slice that fails leaves an unused reference, collected with the thread)
                limits = self.part_limits
                done = await stored_result(self.store, thread.id, output, ctx.blob_threshold, limits)
        except TimeoutError:
            reason, _ = timeout_reason(call.spec, ctx)
            return InlineResult(call=call.call, content=f"error: {reason}")
        except Exception as exc:  # the model hears about a tool's failure
            return InlineResult(call=call.call, content=clean(f"error: {type(exc).__name__}: {exc}"))
        finally:
            self.stats.tool_latency.add(time.perf_counter() - started)
            logs.bind(call_id=None)
        return InlineResult(
            call=call.call,
            content=done.content,
            is_error=done.is_error,
            parts=done.parts,
            threads=tuple(ctx.threads),
            admissions=tuple(ctx.admissions),
            state=tuple(ctx.state_changes),
        )

    async def _failed(self, claim: Claim, exc: BaseException) -> None:
        """Release a failed slice's lease with a backoff, or mark the thread failed."""
        reason = clean(f"{type(exc).__name__}: {exc}")
        if isinstance(exc, ModelError) and exc.outage:  # an endpoint outage is not a failure
            await self._model_outage(claim, exc, reason)
            return
        try:
            thread = await self.store.get_thread(claim.thread_id)
            failures = failures_of(claim, thread)
            permanent = isinstance(exc, UsageError) or (isinstance(exc, ModelError) and not exc.retryable)
            fail = permanent or failures > self.settings.model_retries
            delay = backoff(failures, self.settings.retry_base_s, self.settings.retry_max_s)
            if isinstance(exc, ModelError) and exc.retry_after:
                delay = max(delay, capped(exc.retry_after, self.settings.retry_after_max_s))
            log.warning(
                "slice_failed thread=%s failed=%s: %s",  # readable with no logging set up
                claim.thread_id,
                fail,
                reason,
                extra={"thread_id": claim.thread_id, "error": logs.chain(exc), "failed": fail},
            )
            await self.store.release(claim, retry_at=self.clock() + delay, error=reason, fail=fail)
        except Exception as store_exc:
            # the lease will expire by itself; the inputs are still pending
            log.error(
                "slice_release_failed",
                extra={"thread_id": claim.thread_id, "error": logs.chain(store_exc)},
            )

    async def _poisoned(self, claim: Claim) -> None:
        """Mark failed, without running it, a thread whose slices keep ending without a
        commit or a recorded failure (each killed its worker)."""
        self.stats.slice_failures += 1
        reason = (
            f"PoisonPill: {claim.attempts - 1} slices of this thread ended without a commit or "
            "a recorded failure (did each kill its worker?); not run again until dormant retry"
        )
        log.error("slice_poisoned", extra={"thread_id": claim.thread_id, "attempts": claim.attempts})
        await self._release(claim, error=reason, fail=True)

    async def _model_outage(self, claim: Claim, exc: ModelError, reason: str) -> None:
        """The model endpoint is down or its circuit breaker open: the thread
        waits ``retry_after`` (at least the first backoff) without counting a failure."""
        wait = capped(exc.retry_after or 0.0, self.settings.retry_after_max_s)
        delay = max(wait, self.settings.retry_base_s)
        log.warning(
            "slice_model_outage thread=%s retry_in=%.1fs: %s",
            claim.thread_id,
            delay,
            reason,
            extra={"thread_id": claim.thread_id, "error": reason, "retry_in_s": round(delay, 3)},
        )
        await self._release(claim, retry_at=self.clock() + delay, wait=reason)

    async def _store_unavailable(self, claim: Claim, exc: BaseException) -> None:
        """The store could not take the slice (full, locked, unreachable, overloaded): not its fault.

        The thread's failure count is left alone; it is retried after a backoff that
        grows while the store keeps failing, and claiming pauses as long.
        """
        self._store_errors += 1
        delay = backoff(min(self._store_errors, 16), self.settings.retry_base_s, STORE_RETRY_MAX_S)
        if isinstance(exc, Overloaded):
            delay = max(delay, capped(exc.retry_after, self.settings.retry_after_max_s))
        self.hold(delay)
        log.warning(
            "slice_store_unavailable",
            extra={"thread_id": claim.thread_id, "error": logs.chain(exc), "retry_in_s": round(delay, 3)},
        )
        await self._release(claim, retry_at=self.clock() + delay)

    async def _release(
        self,
        claim: Claim,
        *,
        retry_at: float = 0.0,
        error: str | None = None,
        fail: bool = False,
        wait: str | None = None,
    ) -> None:
        """Release ``claim`` without committing; if the store fails, log it and let the
        lease expire by itself (the inputs are still pending, the next claim tries again)."""
        try:
            await self.store.release(claim, retry_at=retry_at, error=error, fail=fail, wait=wait)
        except Exception as exc:
            log.error(
                "slice_release_failed",
                extra={"thread_id": claim.thread_id, "error": logs.chain(exc)},
            )
