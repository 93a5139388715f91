"""Built-in inline tools: child threads and durable timers.

They change nothing themselves: they record effects on the :class:`ToolContext`
that commit with the slice, in its transaction.
"""

from __future__ import annotations

from datetime import UTC, datetime

from .records import NewInput, NewThread
from .tools import ToolContext, ToolSpec, make_tool


def spawn_thread(task: str, ctx: ToolContext, agent: str | None = None) -> str:
    """Start a child thread on ``task``. The child sees this thread's history up to now
    (by reference, not copied) and answers with report_to_parent; the report arrives
    here as a new message."""
    name = agent or ctx.agent
    if ctx.agents and name not in ctx.agents:
        return f"error: unknown agent {name!r}; known agents: {', '.join(sorted(ctx.agents))}"
    child = f"{ctx.thread_id}/{ctx.call_id}"
    ctx.spawn(NewThread(id=child, agent=name, parent_id=ctx.thread_id, parent_seq=ctx.message_seq - 1))
    ctx.admit(NewInput(thread_id=child, kind="user", dedup_key=f"spawn:{ctx.call_id}", content=task))
    return f"spawned thread {child}; its report will arrive as a message"


def report_to_parent(report: str, ctx: ToolContext) -> str:
    """Send ``report`` to the thread that spawned this one."""
    if not ctx.parent_id:
        return "error: this thread has no parent thread"
    ctx.admit(
        NewInput(
            thread_id=ctx.parent_id,
            kind="report",
            dedup_key=f"report:{ctx.thread_id}:{ctx.call_id}",
            content=report,
            source=ctx.thread_id,
        )
    )
    return f"report sent to {ctx.parent_id}"


def sleep_until(
    ctx: ToolContext, until: str | None = None, seconds: float | None = None, note: str = ""
) -> str:
    """Wake this thread later: at ``until`` (ISO 8601 time) or after ``seconds``.
    The wake-up is a durable timer input; it survives restarts."""
    if (until is None) == (seconds is None):
        return "error: give exactly one of until or seconds"
    if seconds is not None:
        if seconds < 0:
            return "error: seconds must not be negative"
        when = ctx.now + seconds
    else:
        assert until is not None
        try:
            parsed = datetime.fromisoformat(until)
        except ValueError:
            return f"error: {until!r} is not an ISO 8601 time"
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        when = parsed.timestamp()
    stamp = datetime.fromtimestamp(when, tz=UTC).isoformat(timespec="seconds")
    ctx.admit(
        NewInput(
            thread_id=ctx.thread_id,
            kind="timer",
            dedup_key=f"timer:{ctx.call_id}",
            content=note or f"timer set for {stamp} fired",
            not_before=when,
        )
    )
    return f"will wake at {stamp}"


BUILTIN_TOOLS: tuple[ToolSpec, ...] = (
    make_tool(spawn_thread),
    make_tool(report_to_parent),
    make_tool(sleep_until),
)
