"""Frozen records of long-term memory: a memory record, one change of its history, a recall hit.

Rows become these at the backend boundary; nothing above it handles raw rows.
Times are Unix seconds (floats), as everywhere in dormant.
"""

from __future__ import annotations

from typing import Generic, Literal, TypeVar

import msgspec

T = TypeVar("T")

MemoryKind = Literal["fact", "preference", "event", "profile", "knowledge"]
MEMORY_KINDS: frozenset[str] = frozenset({"fact", "preference", "event", "profile", "knowledge"})
ChangeOp = Literal["add", "supersede", "update", "forget", "rebind", "link", "unlink", "merge"]
#: A tag value: typed, so ``severity=3`` and ``severity="3"`` stay different.
TagValue = str | int | float | bool
#: The default tenant: the library API's and the CLI's, the same ``""`` as the threads
#: table's default tenant. A tenant of ``dormant serve`` is its id (``t`` + 12 hex).
DEFAULT_TENANT = ""


class MemoryRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One long-term memory, bound to a subject (a binding key) inside a tenant.

    ``invalid_at`` is set when a newer record supersedes this one or it is forgotten;
    the record itself is never deleted. ``embedding`` is filled only when a read asks
    for it (it lives in the vector index, not beside the text).
    """

    id: str
    tenant: str
    subject: str
    kind: MemoryKind
    text: str
    tags: dict[str, TagValue] = {}
    agent: str | None = None
    thread: str | None = None
    importance: float = 0.5
    source_thread: str | None = None
    source_seq: int | None = None
    #: when the record was last observed: its add, or a later identical add (a repeat
    #: refreshes it); decay runs from it
    created_at: float = 0.0
    #: when the fact became true; versions of one key supersede in ``valid_from`` order
    valid_from: float = 0.0
    invalid_at: float | None = None
    last_access_at: float | None = None
    access_count: int = 0
    content_hash: str = ""
    embedding: tuple[float, ...] | None = None

    def valid_at(self, at: float) -> bool:
        """Whether this record was the valid one at time ``at``."""
        return self.valid_from <= at and (self.invalid_at is None or at < self.invalid_at)


class NewMemory(msgspec.Struct, frozen=True, kw_only=True):
    """A memory to add. ``replaces`` names records this one explicitly supersedes.

    ``valid_from``: when the fact became true (default: ``observed_at``, else the add's
    time); ``observed_at``: when it was seen (default: ``valid_from``, else the add's
    time). A record whose ``valid_from`` is older than a stored version of its key is
    stored as history, already superseded by that version.
    """

    subject: str
    text: str
    kind: MemoryKind = "fact"
    tags: dict[str, TagValue] = {}
    agent: str | None = None
    thread: str | None = None
    importance: float = 0.5
    source_thread: str | None = None
    source_seq: int | None = None
    valid_from: float | None = None
    observed_at: float | None = None
    replaces: tuple[str, ...] = ()


class MemoryChange(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of the memory history: what changed, to which record or subject, by whom."""

    seq: int
    tenant: str
    op: ChangeOp
    subject: str
    record_id: str | None = None
    actor: str = "system"
    at: float = 0.0
    detail: str = ""


class RecallHit(msgspec.Struct, frozen=True, kw_only=True):
    """One recalled record with its final score and the parts it was made of."""

    record: MemoryRecord
    score: float
    text_rank: int | None = None
    vector_rank: int | None = None
    decay: float = 1.0
    #: with ``explain=True``: why it ranked here (``structure``: the structural reason or
    #: ``""``; ``tier``: 0 for a structural answer, 1 for the hybrid ranking; ``fused``,
    #: ``decay``, ``importance``, ``score``: the parts of the score; ``intent``: what the
    #: question was read to ask)
    explain: dict[str, str | float | int | None] | None = None


class Recall(msgspec.Struct, frozen=True, kw_only=True):
    """The answer of a recall: hits best first, and what the ranking could not use."""

    hits: tuple[RecallHit, ...]
    #: ``"vector index unavailable"`` and the like: recall degraded but did not fail
    degraded: tuple[str, ...] = ()


class MemoryPage(msgspec.Struct, Generic[T], frozen=True, kw_only=True):
    """One page of a listing; pass ``next_cursor`` back to get the next (``None``: the end)."""

    items: tuple[T, ...]
    next_cursor: str | None = None


class MemoryStatus(msgspec.Struct, frozen=True, kw_only=True):
    """What memory holds in this process: its embedder and what it costs."""

    embedder: str | None
    #: whether the embedder's model is in memory (it loads on first use)
    embedder_loaded: bool
    #: resident memory the model added when it loaded (counted next to the slices' budget)
    embedder_rss_bytes: int
    #: False: recall runs on text + structure (no vector index here)
    vector_available: bool
