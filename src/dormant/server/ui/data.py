"""What the dashboard's pages show, read from the runtime in bounded pages.

Threads are listed by id (the store's order); a filter (agent, state, last activity)
is applied to at most :data:`SCAN` threads per request, and the page says how far it
scanned and where the next one starts, so a filter matching nothing never reads the
whole store in one request. A thread's timeline is one page of its messages, newest
first, each turned into :class:`Item`s (an input, a reply, a tool call, a tool result;
and the thread's newest compaction summary where it was written):
the template draws an item by its ``kind``, so a new kind of entry is one more branch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

from ...records import Approval, Message, OutboxEntry, Part, Thread
from ...runtime import Runtime
from ...tenants.scope import tenant_of

#: Threads shown per page, and threads a filtered listing reads per request at most.
PAGE = 50
SCAN = 1000
#: Timeline messages per page, and their content read per page at most (bytes).
TIMELINE_PAGE = 50
TIMELINE_BYTES = 512 * 1024
#: Characters of one text shown (the rest is cut, with a note).
SHOWN_CHARS = 8000

State = Literal["", "running", "tool", "person", "model", "failed", "idle"]
STATES: tuple[State, ...] = ("", "running", "tool", "person", "model", "failed", "idle")
#: Last-activity filters: seconds.
ACTIVITY = {"": 0.0, "1h": 3600.0, "1d": 86400.0, "7d": 7 * 86400.0}


def state_of(thread: Thread) -> State:
    """What a thread is doing: ``failed``, ``running`` (a slice holds its lease), ``model``
    (waiting on a model endpoint), ``tool`` (waiting on async tool calls) or ``idle``."""
    if thread.status == "failed":
        return "failed"
    if thread.leased:
        return "running"
    if thread.wait_reason:
        return "model"
    if thread.awaiting:
        return "tool"
    return "idle"


async def live_state(rt: Runtime, thread: Thread) -> State:
    """:func:`state_of`, or ``person`` when the thread has an open approval or question
    (one read of at most one wait)."""
    state = state_of(thread)
    if state in ("tool", "idle") and (await rt.pending(thread_id=thread.id, limit=1)).items:
        return "person"
    return state


@dataclass(frozen=True)
class Filters:
    """A thread listing's filters (empty: any)."""

    agent: str = ""
    state: State = ""
    active: str = ""

    def match(self, thread: Thread, now: float) -> bool:
        """Whether ``thread`` passes every filter."""
        if self.agent and thread.agent != self.agent:
            return False
        if self.state and state_of(thread) != self.state:
            return False
        window = ACTIVITY.get(self.active, 0.0)
        return not (window and thread.updated_at < now - window)

    @property
    def any(self) -> bool:
        """Whether some filter is set."""
        return bool(self.agent or self.state or self.active)


@dataclass
class ThreadListing:
    """One page of a filtered listing: the threads, how many were read, where to go on."""

    items: list[Thread] = field(default_factory=list)
    scanned: int = 0
    next_cursor: str | None = None


async def list_threads(
    rt: Runtime, *, tenant: str | None, cursor: str | None, filters: Filters, now: float | None = None
) -> ThreadListing:
    """Up to :data:`PAGE` threads after ``cursor`` passing ``filters``, reading at most
    :data:`SCAN` threads (``person``: :func:`waiting_threads`)."""
    now = time.time() if now is None else now
    if filters.state == "person":
        return await waiting_threads(rt, tenant=tenant, cursor=cursor, filters=filters, now=now)
    out = ThreadListing()
    at = cursor
    while out.scanned < SCAN:
        page = await rt.threads(
            cursor=at, limit=min(200, SCAN - out.scanned) if filters.any else PAGE, tenant=tenant
        )
        for thread in page.items:
            out.scanned += 1
            at = thread.id
            if filters.match(thread, now):
                out.items.append(thread)
                if len(out.items) == PAGE:
                    out.next_cursor = (
                        thread.id if (page.next_cursor or thread is not page.items[-1]) else None
                    )
                    return out
        if page.next_cursor is None:
            return out
        at = page.next_cursor
    out.next_cursor = at
    return out


async def waiting_threads(
    rt: Runtime, *, tenant: str | None, cursor: str | None, filters: Filters, now: float
) -> ThreadListing:
    """The threads waiting on a person: read from the open waits (oldest request first,
    ``cursor`` a wait's), at most :data:`SCAN` of them a request, each thread once per
    page, passing the other filters."""
    rest = Filters(agent=filters.agent, active=filters.active)
    out = ThreadListing()
    seen: set[str] = set()
    at = cursor
    while out.scanned < SCAN:
        waits = await rt.pending(tenant=tenant, cursor=at, limit=min(200, SCAN - out.scanned))
        for wait in waits.items:
            out.scanned += 1
            at = str(wait.id)
            if wait.thread_id in seen:
                continue
            seen.add(wait.thread_id)
            thread = await rt.thread(wait.thread_id, tenant=tenant)
            if rest.match(thread, now):
                out.items.append(thread)
                if len(out.items) == PAGE:
                    last = wait is waits.items[-1]
                    out.next_cursor = at if (waits.next_cursor or not last) else None
                    return out
        if waits.next_cursor is None:
            return out
        at = waits.next_cursor
    out.next_cursor = at
    return out


@dataclass(frozen=True)
class Item:
    """One entry of a thread's timeline."""

    kind: Literal["input", "reply", "call", "result", "summary", "approval"]
    seq: int
    at: float
    text: str
    cut: bool = False
    name: str | None = None
    call_id: str | None = None
    meta: str | None = None
    wait: Approval | None = None
    #: the message's images and files (on its input, reply or tool result)
    parts: tuple[Part, ...] = ()


#: Pixels of a thumbnail's longer side at most.
THUMB = 240


def thumb_size(part: Part) -> tuple[int, int]:
    """The drawn size of an image part's thumbnail: its own, scaled down to fit
    :data:`THUMB` on its longer side (a square :data:`THUMB` when its size is unknown)."""
    w, h = part.width, part.height
    if w <= 0 or h <= 0:
        return THUMB, THUMB
    scale = min(1.0, THUMB / max(w, h))
    return max(1, round(w * scale)), max(1, round(h * scale))


def size_text(n: int) -> str:
    """A byte count for people: ``812 B``, ``4.2 KiB``, ``1.5 MiB``."""
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / (1024 * 1024):.1f} MiB"


def shown(text: str) -> tuple[str, bool]:
    """``text`` as shown (at most :data:`SHOWN_CHARS`) and whether it was cut."""
    return (text[:SHOWN_CHARS], True) if len(text) > SHOWN_CHARS else (text, False)


def items_of(message: Message) -> list[Item]:
    """The timeline entries of one message, newest first as the page is."""
    text, cut = shown(message.content)
    if message.role == "user":
        return [
            Item(
                "input", message.seq, message.created_at, text, cut, meta=message.source, parts=message.parts
            )
        ]
    if message.role == "tool":
        return [
            Item(
                "result",
                message.seq,
                message.created_at,
                text,
                cut,
                name=message.name,
                call_id=message.tool_call_id,
                parts=message.parts,
            )
        ]
    out: list[Item] = []
    for call in reversed(message.tool_calls):
        args, args_cut = shown(call.arguments)
        out.append(
            Item("call", message.seq, message.created_at, args, args_cut, name=call.name, call_id=call.id)
        )
    if message.content or message.parts or not message.tool_calls:
        usage = message.usage
        meta = f"{usage.prompt} prompt + {usage.completion} completion tokens" if usage else None
        out.append(Item("reply", message.seq, message.created_at, text, cut, meta=meta, parts=message.parts))
    return out


@dataclass
class Timeline:
    """One page of a thread's timeline."""

    items: list[Item]
    next_cursor: str | None


async def timeline(rt: Runtime, thread_id: str, *, tenant: str | None, cursor: str | None) -> Timeline:
    """One page of ``thread_id``'s timeline, newest first (from ``cursor``, a message seq)."""
    page = await rt.history(
        thread_id,
        cursor=cursor,
        limit=TIMELINE_PAGE,
        newest_first=True,
        max_bytes=TIMELINE_BYTES,
        tenant=tenant,
    )
    items = [item for message in page.items for item in items_of(message)]
    summary = await rt.store.latest_summary(thread_id, tenant=tenant)
    if summary is not None and page.items:
        newest, oldest = page.items[0].seq, page.items[-1].seq
        made = summary.made_at_seq  # written when the thread's newest message was this one
        if oldest <= made <= newest or (cursor is None and made >= newest):
            text, cut = shown(summary.content)
            meta = f"compaction summary of messages up to #{summary.upto_seq} ({summary.tokens} tokens)"
            at = next((n for n, item in enumerate(items) if item.seq <= made), len(items))
            items.insert(at, Item("summary", made, 0.0, text, cut, meta=meta))
    waits = await thread_waits(rt, thread_id, tenant=tenant)
    return Timeline(items=with_waits(items, waits, newest=cursor is None), next_cursor=page.next_cursor)


#: Waits of one thread read for its timeline: every open one and the first decided ones.
WAITS = 100


async def thread_waits(rt: Runtime, thread_id: str, *, tenant: str | None) -> dict[str, Approval]:
    """The thread's waits for a person by call id: its open ones and its first
    :data:`WAITS` of any status (two bounded reads)."""
    found: dict[str, Approval] = {}
    for status in ("all", "open"):
        for wait in (await rt.pending(tenant=tenant, thread_id=thread_id, status=status, limit=WAITS)).items:
            found[wait.call_id] = wait
    return found


def _wait_item(wait: Approval, seq: int) -> Item:
    text, cut = shown(wait.arguments)
    at = wait.decided_at or wait.requested_at
    return Item("approval", seq, at, text, cut, name=wait.tool, call_id=wait.call_id, wait=wait)


def with_waits(items: list[Item], waits: dict[str, Approval], *, newest: bool = False) -> list[Item]:
    """``items`` with each wait drawn just above (after, in time) the call that made it;
    on the ``newest`` page, open waits whose call is not on it go on top."""
    out: list[Item] = []
    placed: set[str] = set()
    for item in items:
        wait = waits.get(item.call_id or "") if item.kind == "call" else None
        if wait is not None:
            out.append(_wait_item(wait, item.seq))
            placed.add(wait.call_id)
        out.append(item)
    if newest:
        top = items[0].seq if items else 0
        left = [
            w for w in waits.values() if w.call_id not in placed and w.status in ("requested", "escalated")
        ]
        out[:0] = [_wait_item(w, top) for w in left]
    return out


@dataclass
class CallListing:
    """One page of dead-lettered or outcome-unknown calls the viewer may see."""

    items: list[OutboxEntry]
    next_cursor: str | None


async def failed_calls(rt: Runtime, *, status: str, tenant: str | None, cursor: str | None) -> CallListing:
    """One page (:data:`PAGE` entries read) of outbox entries in ``status``, of ``tenant``'s
    threads only when given."""
    page = await rt.store.list_outbox(status=status, cursor=cursor, limit=PAGE)
    items = [e for e in page.items if tenant is None or tenant_of(e.thread_id) == tenant]
    return CallListing(items=items, next_cursor=page.next_cursor)
