"""``dormant approvals list | show | approve | deny | edit`` and ``dormant answer``: the
waits for a person of a store, decided through :meth:`Runtime.decide` and
:meth:`Runtime.answer` (the one way to decide). Thread ids are as stored (a tenant's
threads start with its id and ``/``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import typer
from rich.table import Table

from ..config import DEFAULT_STORE
from ..errors import InvalidInput
from ..records import Approval
from ..runtime import Runtime
from .agents import AppOpt
from .apps import load_agents
from .base import LimitOpt, StoreOpt, out, run_async, settings_for, when

approvals_app = typer.Typer(help="Tool calls waiting for approval, and questions.", no_args_is_help=True)

Thread = Annotated[str, typer.Argument(help="The thread id (as stored).")]
CallId = Annotated[str, typer.Argument(help="The call id (a question's id for answers).")]
NoteOpt = Annotated[
    str | None, typer.Option("--note", envvar="DORMANT_NOTE", help="Why (the model sees a denial's).")
]
ByOpt = Annotated[str | None, typer.Option("--by", envvar="DORMANT_BY", help="Who decides.")]
KeyOpt = Annotated[
    str | None, typer.Option("--key", envvar="DORMANT_DECISION_KEY", help="The decision's idempotency key.")
]
RoleOpt = Annotated[
    str | None,
    typer.Option("--role", envvar="DORMANT_ROLE", help="The decider's role, when the wait names one."),
]


@asynccontextmanager
async def runtime(store: str, app: str | None) -> AsyncIterator[Runtime]:
    """A runtime over the store (not running: it decides, the workers run the calls)."""
    settings = settings_for(store)
    async with Runtime(settings.store, load_agents(app), settings=settings) as rt:
        yield rt


def show_one(a: Approval) -> None:
    """Print one wait, field by field."""
    fields: dict[str, Any] = {
        "thread": a.thread_id,
        "call": a.call_id,
        "kind": a.kind,
        "tool": a.tool,
        "arguments": a.arguments,
        "status": a.status,
        "role": a.role,
        "deadline": when(a.deadline) if a.deadline else "none (open until acted on)",
        "requested": when(a.requested_at),
        "decided": when(a.decided_at) if a.decided_at else None,
        "by": a.decided_by,
        "note": a.note,
        "ran with": a.decided_arguments,
    }
    for name, value in fields.items():
        if value is not None:
            out.print(f"{name:>10}: {value}")


@approvals_app.command("list")
def list_(
    store: StoreOpt = DEFAULT_STORE,
    status: Annotated[
        str, typer.Option("--status", envvar="DORMANT_APPROVAL_STATUS", help="open, all, or one status.")
    ] = "open",
    thread: Annotated[
        str | None, typer.Option("--thread", envvar="DORMANT_THREAD", help="Only this thread.")
    ] = None,
    tool: Annotated[str | None, typer.Option("--tool", envvar="DORMANT_TOOL", help="Only this tool.")] = None,
    older_than: Annotated[
        float,
        typer.Option(
            "--older-than",
            envvar="DORMANT_OLDER_THAN",
            min=0,
            help="Requested at least this many seconds ago.",
        ),
    ] = 0.0,
    cursor: Annotated[str | None, typer.Option("--cursor", help="Resume after this page.")] = None,
    limit: LimitOpt = 50,
) -> None:
    """One page of waits, oldest first."""

    async def go() -> None:
        async with runtime(store, None) as rt:
            page = await rt.pending(
                thread_id=thread,
                tool=tool,
                status=status,
                older_than_s=older_than,
                cursor=cursor,
                limit=limit,
            )
        table = Table("thread", "call", "tool", "status", "requested", "deadline", "by")
        for a in page.items:
            deadline = when(a.deadline) if a.deadline else "-"
            table.add_row(
                a.thread_id, a.call_id, a.tool, a.status, when(a.requested_at), deadline, a.decided_by or ""
            )
        out.print(table)
        if page.next_cursor:
            out.print(f"more: --cursor {page.next_cursor}")

    run_async(go())


@approvals_app.command("show")
def show(thread: Thread, call_id: CallId, store: StoreOpt = DEFAULT_STORE) -> None:
    """One wait, open or decided."""

    async def go() -> None:
        async with runtime(store, None) as rt:
            show_one(await rt.approval(thread, call_id))

    run_async(go())


def decide(store: str, app: str | None, thread: str, call_id: str, action: str, **options: Any) -> None:
    async def go() -> None:
        async with runtime(store, app) as rt:
            show_one(await rt.decide(thread, call_id, action, **options))

    run_async(go())


@approvals_app.command("approve")
def approve(
    thread: Thread,
    call_id: CallId,
    store: StoreOpt = DEFAULT_STORE,
    note: NoteOpt = None,
    by: ByOpt = None,
    key: KeyOpt = None,
    role: RoleOpt = None,
) -> None:
    """Approve a call: it enters the outbox (exactly once) and a worker runs it."""
    decide(store, None, thread, call_id, "approve", note=note, by=by, key=key, role=role)


@approvals_app.command("deny")
def deny(
    thread: Thread,
    call_id: CallId,
    store: StoreOpt = DEFAULT_STORE,
    note: NoteOpt = None,
    by: ByOpt = None,
    key: KeyOpt = None,
    role: RoleOpt = None,
) -> None:
    """Deny a call: it never runs; the model is told who denied it and why."""
    decide(store, None, thread, call_id, "deny", note=note, by=by, key=key, role=role)


@approvals_app.command("edit")
def edit(
    thread: Thread,
    call_id: CallId,
    args: Annotated[str, typer.Argument(help="The arguments to run instead (a JSON object).")],
    store: StoreOpt = DEFAULT_STORE,
    app: AppOpt = None,
    note: NoteOpt = None,
    by: ByOpt = None,
    key: KeyOpt = None,
    role: RoleOpt = None,
) -> None:
    """Approve a call with edited arguments, checked against the tool's schema (--app
    loads the agent that has the tool)."""
    try:
        parsed = json.loads(args)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"the edited arguments are not JSON: {exc}") from None
    decide(store, app, thread, call_id, "edit", args=parsed, note=note, by=by, key=key, role=role)


def answer(
    thread: Thread,
    question_id: CallId,
    text: Annotated[str, typer.Argument(help="The answer (one of the question's choices when it has some).")],
    store: StoreOpt = DEFAULT_STORE,
    by: ByOpt = None,
    key: KeyOpt = None,
) -> None:
    """Answer an ask_user question of a thread."""

    async def go() -> None:
        async with runtime(store, None) as rt:
            show_one(await rt.answer(thread, question_id, text, by=by, key=key))

    run_async(go())
