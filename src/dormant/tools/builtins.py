"""Built-in inline tools: child threads, durable timers, reading stored tool outputs.

They change nothing themselves: they record effects on the :class:`ToolContext`
that commit with the slice, in its transaction (``read_blob`` only reads).
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime

from ..errors import NotFound, UsageError
from ..inbox import MAX_DEDUP_KEY_BYTES, MAX_THREAD_ID_BYTES
from ..parts.media import sniff
from ..records import NewInput, NewThread
from .blobs import whole_chars
from .spec import ToolContext, ToolSpec, make_tool

#: The most text one read_blob call returns (UTF-8 bytes, footer included).
READ_BLOB_MAX = 16 * 1024
#: Room kept for read_blob's footer line.
FOOTER_BYTES = 120


#: Hex digits of the hash that ends an id too long to keep whole.
HASH_CHARS = 32


def bounded(name: str, limit: int) -> str:
    """``name`` if it fits ``limit`` UTF-8 bytes; else its head (cut on a character
    boundary) + ``~`` + a hash of the whole name: the same name always gives the
    same id, two names differing only in their cut tail do not collide."""
    data = name.encode(errors="surrogatepass")
    if len(data) <= limit:
        return name
    digest = hashlib.sha256(data).hexdigest()[:HASH_CHARS]
    head = data[: limit - HASH_CHARS - 1].decode(errors="ignore")
    return f"{head}~{digest}"


def child_id(parent: str, call_id: str) -> str:
    """The id of the child thread that call ``call_id`` of ``parent`` spawns:
    ``parent/call_id``, hashed down to the thread id limit when longer."""
    return bounded(f"{parent}/{call_id}", MAX_THREAD_ID_BYTES)


#: A path segment of a child thread's id: ``<call id>`` as the slice stores it (``x.<seq>.<index>``).
_CHILD_SEGMENT = re.compile(r"^.+\.\d+\.\d+$")


def spawn_depth(thread_id: str) -> int:
    """How many spawns deep ``thread_id`` is: its id is its parent's id, ``/`` and the
    spawning call's id (a root id that looks like that counts too: the limit errs strict)."""
    return sum(1 for segment in thread_id.split("/")[1:] if _CHILD_SEGMENT.match(segment))


def spawn_thread(task: str, ctx: ToolContext, agent: str | None = None) -> str:
    """Start a child thread on ``task``. The child sees this thread's history up to now
    (by reference, not copied) and answers with report_to_parent; the report arrives
    here as a new message."""
    name = agent or ctx.agent
    if ctx.agents and name not in ctx.agents:
        return f"error: unknown agent {name!r}; known agents: {', '.join(sorted(ctx.agents))}"
    depth = spawn_depth(ctx.thread_id)
    if depth >= ctx.max_spawn_depth:
        return (
            f"error: this thread is {depth} spawns deep, the limit is {ctx.max_spawn_depth}; "
            "do the task here instead of spawning"
        )
    if ctx.children >= ctx.max_children:
        return (
            f"error: this thread already spawned {ctx.children} threads, the limit is "
            f"{ctx.max_children}; wait for their reports or do the task here"
        )
    child = child_id(ctx.thread_id, ctx.call_id)
    ctx.spawn(NewThread(id=child, agent=name, parent_id=ctx.thread_id, parent_seq=ctx.message_seq - 1))
    key = bounded(f"spawn:{ctx.call_id}", MAX_DEDUP_KEY_BYTES)
    ctx.admit(NewInput(thread_id=child, kind="user", dedup_key=key, content=task))
    return f"spawned thread {child}; its report will arrive as a message"


def report_to_parent(report: str, ctx: ToolContext) -> str:
    """Send ``report`` to the thread that spawned this one."""
    if not ctx.parent_id:
        return "error: this thread has no parent thread"
    ctx.admit(
        NewInput(
            thread_id=ctx.parent_id,
            kind="report",
            dedup_key=bounded(f"report:{ctx.thread_id}:{ctx.call_id}", MAX_DEDUP_KEY_BYTES),
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
            dedup_key=bounded(f"timer:{ctx.call_id}", MAX_DEDUP_KEY_BYTES),
            content=note or f"timer set for {stamp} fired",
            not_before=when,
        )
    )
    return f"will wake at {stamp}"


async def read_blob(ref: str, ctx: ToolContext, offset: int = 0, length: int = 8192) -> str:
    """Read part of a large tool output that was stored as a blob, or of a text file sent
    in a message: ``length`` bytes from byte ``offset`` of blob ``ref`` (the sha256:...
    named where the output was cut, or a part's reference). The answer ends with the next
    offset to read from; at most 16 KiB per call. An image or a PDF is not text: the answer
    says so (the message holding it shows its text)."""
    if ctx.blobs is None:
        return "error: no blob store is available to this tool call"
    if offset < 0 or length < 1:
        return "error: offset must be 0 or more and length 1 or more"
    # the answer must stay under the blob threshold, or it would be stored as a blob again
    budget = max(256, min(READ_BLOB_MAX, ctx.blob_threshold) - FOOTER_BYTES)
    try:
        blob = await ctx.blobs.get_blob(ctx.thread_id, ref)
        data = await ctx.blobs.read_blob(ctx.thread_id, ref, offset, min(length, budget))
        head = data if offset == 0 else await ctx.blobs.read_blob(ctx.thread_id, ref, 0, 16)
    except NotFound:
        return f"error: no blob {ref!r} in this thread's history (copy the full sha256:... reference)"
    except UsageError as exc:
        return f"error: {exc}"
    media = sniff(head[:16])  # magic numbers only: is it an image or a PDF?
    if media.startswith("image/") or media == "application/pdf":
        what = "an image" if media.startswith("image/") else "a PDF"
        return (
            f"[blob {ref} is {what} ({media}, {blob.size} bytes), not text: the message that holds "
            "it shows its text and facts]"
        )
    if not data:
        return f"[nothing at offset {offset}: the blob has {blob.size} bytes]"
    skip, keep = whole_chars(data, start=offset > 0, end=offset + len(data) < blob.size)
    text = data[skip:keep].decode("utf-8", errors="replace")
    while len(text.encode()) > budget:  # bytes that are not UTF-8 grow when replaced
        keep = skip + max(1, (keep - skip) * budget // len(text.encode()) - 1)
        text = data[skip:keep].decode("utf-8", errors="replace")
    start, end = offset + skip, offset + keep
    more = f"next offset {end}" if end < blob.size else "end of blob"
    return f"{text}\n[bytes {start}-{end} of {blob.size}; {more}]"


def ask_user(question: str, choices: list[str] | None = None) -> str:
    """Ask the person you serve a question and wait for their answer: one of
    ``choices`` when you give some, else free text. Use it when only they can decide."""
    # never run: a slice commits an ask_user call as a wait for the answer (dormant.approvals)
    return "error: ask_user is answered by a person, not run"


#: The question tool (opt in: ``Agent(tools=[ASK_USER_TOOL, ...])``).
ASK_USER_TOOL = make_tool(ask_user)

BUILTIN_TOOLS: tuple[ToolSpec, ...] = (
    make_tool(spawn_thread),
    make_tool(report_to_parent),
    make_tool(sleep_until),
    make_tool(read_blob),
)
