"""Row layouts shared by the SQL backends, and the functions that turn rows into records.

Both backends select these columns in this order, so one converter serves both;
each backend still owns the statements around them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from ..memory.records import MemoryChange, MemoryRecord
from ..memory.registers import read as read_registers
from ..records import (
    ApiKey,
    Input,
    JournalEntry,
    Message,
    OutboxEntry,
    Part,
    Priority,
    Summary,
    Tenant,
    Thread,
    TierSizes,
    ToolCall,
    Usage,
)

THREAD_COLS = (
    "id, agent, parent_id, parent_seq, status, last_seq, awaiting, failures, error, created_at, updated_at, "
    "tokens, summarized_tokens, summary_seq, usage_prompt, usage_completion, usage_cached, "
    "wait_reason, wait_until, client_tools, lease_token IS NOT NULL"
)
INPUT_COLS = (
    "id, thread_id, kind, dedup_key, content, priority, not_before, admitted_at, "
    "call_id, tool_name, is_error, source, parts"
)
MESSAGE_COLS = (
    "seq, role, content, tool_calls, tool_call_id, name, source, input_id, created_at, tokens, "
    "finish_reason, reasoning, usage_prompt, usage_completion, usage_cached, parts"
)
SUMMARY_COLS = "thread_id, upto_seq, content, tokens, covered_tokens, made_at_seq, created_at"
OUTBOX_COLS = (
    "id, thread_id, agent, call_id, tool, arguments, status, attempts, idempotent, "
    "lease_token, last_error, created_at"
)
JOURNAL_COLS = (
    "thread_id, seq, kind, key, value, run, upto, parts, size, digest, recoverable, created_at, msg_seq"
)
THREAD_WIDTH = THREAD_COLS.count(",") + 1
#: Largest journal state a thread row carries (JSON bytes); a bigger one is not on the row
#: (NULL: a slice replays the journal).
MAX_ROW_STATE_BYTES = 64 * 1024
_STATE_ROW = msgspec.json.Decoder(dict[str, str])
#: Tables whose rows belong to a thread (``thread_id``), deleted with it.
THREAD_TABLES = (
    "messages",
    "inputs",
    "input_keys",
    "outbox",
    "approvals",
    "summaries",
    "state_journal",
    "state_parts",
)

PRIORITIES = tuple(Priority)  # by value: cheaper than Priority(n) per row
TOOL_CALLS = msgspec.json.Decoder(tuple[ToolCall, ...])
PARTS = msgspec.json.Decoder(tuple[Part, ...])
_PARTS_OUT = msgspec.json.Encoder()


def encode_parts(parts: Sequence[Part]) -> str | None:
    """A ``parts`` column's value: JSON references and facts, NULL for none."""
    return _PARTS_OUT.encode(parts).decode() if parts else None


def row_thread(row: Sequence[Any]) -> Thread:
    """A ``threads`` row (THREAD_COLS) as a :class:`Thread`."""
    return Thread(
        id=row[0],
        agent=row[1],
        parent_id=row[2],
        parent_seq=row[3],
        status=row[4],
        last_seq=row[5],
        awaiting=row[6],
        failures=row[7],
        error=row[8],
        created_at=row[9],
        updated_at=row[10],
        tokens=row[11],
        summarized_tokens=row[12],
        summary_seq=row[13],
        usage_prompt=row[14],
        usage_completion=row[15],
        usage_cached=row[16],
        wait_reason=row[17],
        wait_until=row[18],
        client_tools=row[19],
        leased=bool(row[20]),
    )


def row_input(row: Sequence[Any]) -> Input:
    """An ``inputs`` row (INPUT_COLS) as an :class:`Input`."""
    return Input(
        id=row[0],
        thread_id=row[1],
        kind=row[2],
        dedup_key=row[3],
        content=row[4],
        priority=PRIORITIES[row[5]],
        not_before=row[6],
        admitted_at=row[7],
        call_id=row[8],
        tool_name=row[9],
        is_error=bool(row[10]),
        source=row[11],
        parts=PARTS.decode(row[12]) if row[12] else (),
    )


def row_message(row: Sequence[Any]) -> Message:
    """A ``messages`` row (MESSAGE_COLS) as a :class:`Message`."""
    return Message(
        seq=row[0],
        role=row[1],
        content=row[2],
        tool_calls=TOOL_CALLS.decode(row[3]) if row[3] else (),
        tool_call_id=row[4],
        name=row[5],
        source=row[6],
        input_id=row[7],
        created_at=row[8],
        tokens=row[9] or 0,
        finish_reason=row[10],
        reasoning=row[11],
        usage=None
        if row[12] is None
        else Usage(prompt=row[12], completion=row[13] or 0, cached=row[14] or 0),
        parts=PARTS.decode(row[15]) if row[15] else (),
    )


def row_summary(row: Sequence[Any]) -> Summary:
    """A ``summaries`` row (SUMMARY_COLS) as a :class:`Summary`."""
    return Summary(
        thread_id=row[0],
        upto_seq=row[1],
        content=row[2],
        tokens=row[3],
        covered_tokens=row[4],
        made_at_seq=row[5],
        created_at=row[6],
    )


def row_entry(row: Sequence[Any]) -> OutboxEntry:
    """An ``outbox`` row (OUTBOX_COLS) as an :class:`OutboxEntry`."""
    return OutboxEntry(
        id=row[0],
        thread_id=row[1],
        agent=row[2],
        call_id=row[3],
        tool=row[4],
        arguments=row[5],
        status=row[6],
        attempts=row[7],
        idempotent=bool(row[8]),
        token=row[9],
        last_error=row[10],
        created_at=row[11],
    )


def row_tenant(row: Sequence[Any]) -> Tenant:
    """A ``tenants`` row (id, name, created_at) as a :class:`Tenant`."""
    return Tenant(id=row[0], name=row[1], created_at=float(row[2]))


def row_key(row: Sequence[Any]) -> ApiKey:
    """An ``api_keys`` row (id, tenant_id, created_at, revoked_at) as an :class:`ApiKey`."""
    revoked = row[3]
    return ApiKey(
        id=row[0],
        tenant_id=row[1],
        created_at=float(row[2]),
        revoked_at=None if revoked is None else float(revoked),
    )


def row_live_key(row: Sequence[Any]) -> tuple[bytes, bytes, Tenant]:
    """A live key's (salt, digest) and its tenant (``LIVE_KEY``: salt, digest, tenant columns)."""
    return bytes(row[0]), bytes(row[1]), row_tenant(row[2:])


def usage_and_waits(
    totals: Sequence[Any], waiting: Sequence[Any], reasons: Sequence[Sequence[Any]]
) -> dict[str, Any]:
    """The usage and wait fields of a :class:`~dormant.records.StoreStatus` from a totals
    row (prompt, completion, cached sums), the (count, latest until) row of the threads
    waiting on a model endpoint and the (reason, count) rows of their commonest reasons."""
    prompt, completion, cached = (int(value or 0) for value in totals)
    return {
        "usage": {"prompt": prompt, "completion": completion, "cached": cached},
        "threads_waiting": int(waiting[0] or 0),
        "waiting_until": float(waiting[1] or 0),
        "waiting_by_reason": {str(reason): int(count) for reason, count in reasons},
    }


def row_journal(row: Sequence[Any]) -> JournalEntry:
    """A ``state_journal`` row (JOURNAL_COLS) as a :class:`JournalEntry`."""
    return JournalEntry(
        thread_id=row[0],
        seq=row[1],
        kind=row[2],
        key=row[3],
        value=row[4],
        run=row[5],
        upto=row[6],
        parts=row[7],
        size=row[8],
        digest=row[9],
        recoverable=bool(row[10]),
        created_at=row[11],
        msg_seq=row[12],
    )


def memory_params(key: str | None, rec: MemoryRecord, tenant: str, subject: str, tags: Any) -> list[Any]:
    """A memory record's row values, key tag first, in ``memory_records`` column order
    (``tags`` as the backend stores them: JSON text on SQLite, jsonb on PostgreSQL)."""
    return [
        key,
        rec.id,
        tenant,
        subject,
        rec.kind,
        rec.text,
        tags,
        rec.agent,
        rec.thread,
        rec.importance,
        rec.source_thread,
        rec.source_seq,
        rec.created_at,
        rec.valid_from,
        rec.invalid_at,
        rec.last_access_at,
        rec.access_count,
        rec.content_hash,
    ]


def row_memory(
    row: Sequence[Any], tags: dict[str, Any], embedding: tuple[float, ...] | None = None
) -> MemoryRecord:
    """A memory record from a row of the backends' record columns (``row[1:18]``; ``tags``
    decoded by the backend)."""
    return MemoryRecord(
        id=row[1],
        tenant=row[2],
        subject=row[3],
        kind=row[4],
        text=row[5],
        tags=tags,
        agent=row[7],
        thread=row[8],
        importance=row[9],
        source_thread=row[10],
        source_seq=row[11],
        created_at=row[12],
        valid_from=row[13],
        invalid_at=row[14],
        last_access_at=row[15],
        access_count=row[16],
        content_hash=row[17],
        embedding=embedding,
    )


def row_tier_sizes(row: Sequence[Any]) -> TierSizes:
    """The bytes of each retention tier from a ``TIER_SIZES`` row."""
    full, cut, history, journal, blobs, keys = row
    return TierSizes(
        tool_full=int(full),
        tool_excerpt=int(cut),
        history=int(history),
        journal=int(journal),
        blobs=int(blobs),
        dedup_keys=int(keys),
    )


def state_row(state: Mapping[str, str]) -> tuple[str | None, str | None]:
    """The thread row's ``state`` (the journal state as JSON text; None over
    :data:`MAX_ROW_STATE_BYTES`) and ``subject`` (its register's binding key, if any)."""
    text = msgspec.json.encode(dict(state)).decode()
    return (text if len(text) <= MAX_ROW_STATE_BYTES else None), read_registers(state).subject


def row_state(text: str | None) -> dict[str, str] | None:
    """A thread row's ``state`` column as the journal state (None stays None: unknown)."""
    if text is None:
        return None
    return {} if text == "{}" else _STATE_ROW.decode(text)


def row_memory_change(row: Sequence[Any]) -> MemoryChange:
    """A ``memory_history`` row (seq, tenant, op, subject, record_id, actor, at, detail)."""
    return MemoryChange(
        seq=row[0],
        tenant=row[1],
        op=row[2],
        subject=row[3],
        record_id=row[4],
        actor=row[5],
        at=row[6],
        detail=row[7],
    )


#: The dialect-free end of both backends' ``TIER_SIZES`` (journal, blob and dedup-key
#: bytes); each backend writes the message tiers in its own dialect before it.
TIER_SIZES_TAIL = """\
       (SELECT coalesce(sum(64 + coalesce(octet_length(value), 0)), 0) FROM state_journal)
         + (SELECT coalesce(sum(octet_length(data)), 0) FROM state_parts),
       (SELECT coalesce(sum(size), 0) FROM blobs WHERE size > 0),
       (SELECT coalesce(sum(octet_length(thread_id) + octet_length(dedup_key) + 24), 0) FROM input_keys)
FROM messages
"""
