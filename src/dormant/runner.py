"""Running one slice: load a bounded view, compact, call the model, run inline tools, commit.

A slice, as run here: load a bounded view → :class:`~dormant.slice.Turn` decides →
call the model (collected in a turn buffer) → run inline tools → loop (bounded) →
commit the plan in one transaction → forget. A failed slice commits nothing: its
inputs stay pending and the thread is retried after a backoff; after
``model_retries`` failures in a row the thread is marked failed, with the reason in
its ``error``, until ``dormant retry``.

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
import json
import logging
import time
from collections.abc import Callable, Mapping

import msgspec

from . import compaction
from .agent import Agent
from .config import Settings
from .errors import (
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
from .records import Claim, CommitPlan, SliceLoad, Summary, Thread, ToolCall, ViewLimits
from .retry import STORE_RETRY_MAX_S, backoff, capped
from .slice import InlineCall, InlineResult, Turn
from .store.base import Store
from .text import clean, stored_output
from .tokens import DEFAULT_ENCODING, TokenCounter, count_text
from .tool_threads import ToolThreads
from .tools import ToolContext, timeout_reason

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


def clean_reply(reply: ModelReply) -> ModelReply:
    """``reply`` with its text and tool calls cleaned (:func:`~dormant.text.clean`);
    the same object when nothing needed it (the common case: a few scans, no copy)."""
    text = clean(reply.text)
    changed = text is not reply.text
    calls = []
    for call in reply.tool_calls:
        cleaned = _clean_call(call)
        changed = changed or cleaned is not call
        calls.append(cleaned)
    return ModelReply(text=text, tool_calls=tuple(calls)) if changed else reply


def _clean_call(call: ToolCall) -> ToolCall:
    ident, name, arguments = clean(call.id), clean(call.name), clean(call.arguments)
    if ident is call.id and name is call.name and arguments is call.arguments:
        return call
    return ToolCall(id=ident, name=name, arguments=arguments)


def failures_of(claim: Claim, thread: Thread) -> int:
    """This slice's failure number: the attempts the store counted when it was claimed,
    when the claim carries them (a slice that killed its worker counts too), else the
    thread's recorded failures plus this one."""
    attempts = getattr(claim, "attempts", 0)  # counted at claim time by stores that do
    return attempts if isinstance(attempts, int) and attempts > 0 else thread.failures + 1


def view_limits(agent: Agent, settings: Settings) -> ViewLimits:
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
        return min(left, settings.view_tokens) if settings.view_tokens else left

    limits = ViewLimits(
        max_messages=settings.view_messages,
        max_bytes=settings.view_bytes,
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


class SliceRunner:
    """Runs slices for claims: the only place a slice does I/O.

    ``hold(seconds)`` pauses claiming (the store cannot commit now), ``on_commit()`` is
    called after each committed slice, ``on_damage(exc)`` when the database is damaged.
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
        # per agent: its model's window less its output, system prompt and tool schemas
        self.limits = {name: view_limits(agent, settings) for name, agent in agents.items()}
        self._counters: dict[str, TokenCounter] = {}
        self._names = frozenset(agents)
        self._store_errors = 0  # slices in a row that the store could not take

    def _counter(self, encoding: str) -> TokenCounter:
        counter = self._counters.get(encoding)
        if counter is None:
            counter = self._counters[encoding] = TokenCounter(encoding)
        return counter

    async def run(self, claim: Claim) -> None:
        """Run one slice for ``claim``: load, decide, call, commit. Never raises
        (but a cancelled slice, whose lease was lost, is cancelled)."""
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
            self.on_damage(exc)
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
            self.on_commit()

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
        """One model call under the model timeout; the reply cleaned."""
        try:
            async with asyncio.timeout(self.settings.model_timeout_s):
                reply = await collect(agent.model.stream(request))
        except TimeoutError:
            timeout = self.settings.model_timeout_s
            raise ModelError(f"the model did not answer within {timeout:g}s") from None
        self.stats.completions += 1
        return clean_reply(reply)

    async def _compact(
        self, load: SliceLoad, agent: Agent, limits: ViewLimits, counter: TokenCounter | None
    ) -> tuple[SliceLoad, Summary | None]:
        """Summarize the older part of ``load``'s view; on failure, ``load`` unchanged.

        A failed compaction costs the slice nothing: the thread goes on with its view
        (still bounded by the budget) and compaction is tried again on its next slice.
        """
        keep = self.settings.compaction_keep
        index = compaction.cut_index(
            load.view[load.inherited :], int(limits.max_tokens * keep), int(limits.max_bytes * keep)
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
            log.warning(
                "compaction_failed",
                extra={"thread_id": load.thread.id, "error": f"{type(exc).__name__}: {exc}"},
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
            tool_threads=self.tool_threads,
        )
        try:
            async with asyncio.timeout(call.spec.timeout):
                output = await call.spec.run(call.args, ctx)
                # a large output goes to the store now (outside the slice's transaction: a
                # slice that fails leaves an unused reference, collected with the thread)
                content = await stored_output(self.store, thread.id, output, ctx.blob_threshold)
        except TimeoutError:
            reason, _ = timeout_reason(call.spec, ctx)
            return InlineResult(call=call.call, content=f"error: {reason}")
        except Exception as exc:  # the model hears about a tool's failure
            return InlineResult(call=call.call, content=clean(f"error: {type(exc).__name__}: {exc}"))
        return InlineResult(
            call=call.call,
            content=content,
            threads=tuple(ctx.threads),
            admissions=tuple(ctx.admissions),
        )

    async def _failed(self, claim: Claim, exc: BaseException) -> None:
        """Release a failed slice's lease with a backoff, or mark the thread failed."""
        reason = clean(f"{type(exc).__name__}: {exc}")
        try:
            thread = await self.store.get_thread(claim.thread_id)
            failures = failures_of(claim, thread)
            permanent = isinstance(exc, UsageError) or (isinstance(exc, ModelError) and not exc.retryable)
            fail = permanent or failures > self.settings.model_retries
            delay = backoff(failures, self.settings.retry_base_s, self.settings.retry_max_s)
            if isinstance(exc, ModelError) and exc.retry_after:
                delay = max(delay, capped(exc.retry_after, self.settings.retry_after_max_s))
            log.warning(
                "slice_failed",
                extra={"thread_id": claim.thread_id, "error": reason, "failed": fail},
            )
            await self.store.release(claim, retry_at=self.clock() + delay, error=reason, fail=fail)
        except Exception as store_exc:
            # the lease will expire by itself; the inputs are still pending
            log.error(
                "slice_release_failed",
                extra={"thread_id": claim.thread_id, "error": f"{type(store_exc).__name__}: {store_exc}"},
            )

    async def _store_unavailable(self, claim: Claim, exc: BaseException) -> None:
        """The store could not take the slice (locked, full, overloaded): not the thread's fault.

        The thread's failure count is left alone; it is retried after a backoff that
        grows while the store keeps failing, and claiming pauses as long.
        """
        self._store_errors += 1
        delay = backoff(min(self._store_errors, 16), self.settings.retry_base_s, STORE_RETRY_MAX_S)
        if isinstance(exc, Overloaded):
            delay = max(delay, capped(exc.retry_after, self.settings.retry_after_max_s))
        self.hold(delay)
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
