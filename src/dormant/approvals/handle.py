"""The runtime's handle on waits for a person (a mixin of :class:`~dormant.runtime.Runtime`):
``rt.pending``, ``rt.approval``, ``rt.decide``, ``rt.answer`` and the expiry sweep. This is
the one way to decide: the HTTP routes, the CLI and the dashboard call these."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import InvalidInput, StoreError, UsageError
from ..records import Approval, Page
from . import ACTIONS, check_answer, check_texts, denied_text, edited_arguments

if TYPE_CHECKING:
    from ..agent import Agent
    from ..metrics import RuntimeStats
    from ..slices.dispatcher import Dispatcher
    from ..slices.scheduler import Scheduler
    from ..store import Store

log = logging.getLogger("dormant.approvals")
#: Seconds between rounds of the expiry sweep.
SWEEP_S = 1.0


class ApprovalApi:
    """Listing, deciding and answering waits for a person."""

    if TYPE_CHECKING:
        store: Store
        agents: dict[str, Agent]
        scheduler: Scheduler
        dispatcher: Dispatcher
        stats: RuntimeStats

        @property
        def on_change(self) -> Callable[[str], None] | None: ...

    def _changed(self, thread_id: str) -> None:
        observer = self.on_change
        if observer is not None:
            observer(thread_id)  # the thread's event streams read the decision

    def _counted(self, outcome: str, n: int = 1) -> None:
        if n:
            self.stats.approvals[outcome] = self.stats.approvals.get(outcome, 0) + n

    async def pending(
        self,
        *,
        tenant: str | None = None,
        thread_id: str | None = None,
        tool: str | None = None,
        older_than_s: float = 0.0,
        status: str = "open",
        cursor: str | None = None,
        limit: int = 100,
    ) -> Page[Approval]:
        """A page of waits, oldest first: open ones by default (``status="all"``: the whole
        history, or one status), filtered by tenant, thread, tool and age in seconds."""
        return await self.store.approvals(
            tenant=tenant,
            thread_id=thread_id,
            tool=tool,
            status=status,
            older_than_s=older_than_s,
            cursor=cursor,
            limit=limit,
        )

    async def approval(self, thread_id: str, call_id: str, *, tenant: str | None = None) -> Approval:
        """One wait (NotFound if none, or another tenant's)."""
        return await self.store.approval(thread_id, call_id, tenant=tenant)

    async def decide(
        self,
        thread_id: str,
        call_id: str,
        action: str,
        *,
        args: dict[str, Any] | None = None,
        note: str | None = None,
        by: str | None = None,
        key: str | None = None,
        role: str | None = None,
        tenant: str | None = None,
    ) -> Approval:
        """Decide a call waiting for approval: ``approve`` (it enters the outbox, exactly
        once), ``edit`` (it runs with ``args``, validated against the tool's schema; the
        edit is recorded) or ``deny`` (the model gets a result naming ``by`` and ``note``).
        Durable before it returns. Idempotent by ``key``; a different decision on a
        decided call raises DecisionConflict (409) carrying the first. A wait that names a
        role takes a decision with that ``role`` only. NotFound for an unknown call."""
        if action not in ACTIONS:
            raise InvalidInput(f"a decision is one of {', '.join(ACTIONS)}, not {action!r}")
        check_texts(note=note, by=by, key=key, role=role)
        wait = await self.store.approval(thread_id, call_id, tenant=tenant)
        if wait.kind == "question":
            raise UsageError(f"{call_id!r} is a question: answer it (rt.answer), not {action}")
        if wait.role is not None and wait.status in ("requested", "escalated") and role != wait.role:
            raise InvalidInput(f"call {call_id!r} waits for a decider of role {wait.role!r}")
        arguments: str | None = wait.arguments
        result = ""
        if action == "edit":
            if args is None:
                raise InvalidInput("an edit gives the call's new arguments (args=)")
            agent = self.agents.get((await self.store.get_thread(thread_id, tenant=tenant)).agent)
            spec = agent.toolbox.get(wait.tool) if agent else None
            if spec is None:
                raise InvalidInput(
                    f"tool {wait.tool!r} is not known to this process: an edit cannot be checked "
                    "against its schema (load the thread's agent, e.g. --app)"
                )
            arguments = edited_arguments(spec, args)
        elif args is not None:
            raise InvalidInput(f"only an edit takes arguments, not {action}")
        if action == "deny":
            arguments, result = None, denied_text(wait.tool, by, note)
        fresh, row = await self.store.decide_approval(
            thread_id,
            call_id,
            status=ACTIONS[action],
            result=result,
            arguments=arguments,
            key=key,
            by=by,
            note=note,
            tenant=tenant,
        )
        if fresh:
            log.info(
                "approval_decided", extra={"thread_id": thread_id, "call_id": call_id, "status": row.status}
            )
            self.scheduler.wake.set()
            self.dispatcher.wake.set()
        return row

    async def answer(
        self,
        thread_id: str,
        question_id: str,
        text: str,
        *,
        by: str | None = None,
        key: str | None = None,
        tenant: str | None = None,
    ) -> Approval:
        """Answer an open ``ask_user`` question: ``text`` must be one of its choices when
        it has some. The thread runs on with the answer as the question's result.
        Idempotent like :meth:`decide` (the same answer again answers the first)."""
        check_texts(note=None, by=by, key=key)
        wait = await self.store.approval(thread_id, question_id, tenant=tenant)
        if wait.kind != "question":
            raise UsageError(f"{question_id!r} is a call waiting for approval: decide it, not answer it")
        answer = check_answer(wait, text)
        fresh, row = await self.store.decide_approval(
            thread_id,
            question_id,
            status="answered",
            result=answer,
            key=key,
            by=by,
            note=answer,
            tenant=tenant,
        )
        if fresh:
            self._counted("answered")
            self._changed(thread_id)
            self.scheduler.wake.set()
        return row

    async def sweep_approvals(self, stop: asyncio.Event) -> None:
        """Expire (or escalate) waits past their deadline, every :data:`SWEEP_S`, until ``stop``."""
        while not stop.is_set():
            try:
                expired, escalated = await self.store.expire_approvals()
            except StoreError as exc:
                log.warning("approval_sweep_failed", extra={"error": str(exc)})
                expired = escalated = 0
            self._counted("expired", expired)
            self._counted("escalated", escalated)
            if expired:
                self.scheduler.wake.set()
            if expired or escalated:
                log.info("approvals_expired", extra={"expired": expired, "escalated": escalated})
                continue  # there may be more due
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), SWEEP_S)
