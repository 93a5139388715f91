"""Request and response bodies of the memory endpoints of the REST API (v1).

A subject is named either by binding keys (``subject`` / ``subjects``, from
``POST /v1/memory/bind``) or by identity parts (``identity``), bound on the way in.
Records convert to the wire form here and nowhere else.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, StringConstraints, model_validator

from ..memory.backend import AddResult
from ..memory.records import MemoryChange, MemoryKind, MemoryRecord, RecallHit, TagValue
from .schemas import Body

#: A binding key (``b2_`` + 64 hex digits; ``b1_`` for a key made before keys were keyed hashes).
KEY_PATTERN = r"^b[0-9]+_[0-9a-f]{64}$"
#: Identity parts: name -> value (``{"phone": "+1 555-0100", "device": "ios-1"}``).
Identity = dict[
    Annotated[str, StringConstraints(min_length=1, max_length=64)],
    Annotated[str, StringConstraints(max_length=256)],
]
Key = Annotated[str, StringConstraints(pattern=KEY_PATTERN)]
Tags = dict[str, TagValue]


def _one_subject(keys: list[str], identity: Identity | None) -> None:
    if bool(keys) == (identity is not None):
        raise ValueError("name the subject by binding key(s) or by identity, exactly one of them")


class MemoryAdd(Body):
    """One memory of a subject (its binding key, or identity parts bound here)."""

    text: str = Field(..., min_length=1, max_length=8_000)
    subject: Key | None = Field(None, description="a binding key")
    identity: Identity | None = Field(
        None, max_length=16, description="identity parts, bound into the subject key"
    )
    kind: MemoryKind = "fact"
    tags: Tags = Field(default_factory=dict, description="typed tags (at most a few dozen)")
    importance: float = Field(0.5, ge=0.0, le=1.0)
    replaces: list[str] = Field(default_factory=list, max_length=100, description="ids this supersedes")
    valid_from: float | None = Field(
        None, ge=0, le=1e11, description="UNIX time it became true (default: observed_at, else now)"
    )
    observed_at: float | None = Field(
        None, ge=0, le=1e11, description="UNIX time it was seen (default: valid_from, else now)"
    )

    @model_validator(mode="after")
    def _subject(self) -> MemoryAdd:
        _one_subject([self.subject] if self.subject else [], self.identity)
        return self


class MemoryRecall(Body):
    """Recall the best ``k`` memories of the subject(s) for ``query``."""

    query: str = Field("", max_length=8_000)
    subjects: list[Key] = Field(default_factory=list, max_length=64)
    identity: Identity | None = Field(None, max_length=16)
    tags: Tags = Field(default_factory=dict)
    kinds: list[MemoryKind] = Field(default_factory=list, max_length=5)
    k: int = Field(5, ge=1, le=100)
    at: float | None = Field(None, ge=0, le=1e11, description="as of this UNIX time (default: now)")
    history: bool = Field(False, description="also records superseded or forgotten by ``at``")
    explain: bool = Field(False, description="each hit with the parts of its rank")

    @model_validator(mode="after")
    def _subject(self) -> MemoryRecall:
        _one_subject(self.subjects, self.identity)
        return self


class MemoryBind(Body):
    """Identity parts to bind into a subject key."""

    identity: Identity = Field(..., min_length=1, max_length=16)


class BindOut(BaseModel):
    """The binding key of the identity."""

    key: str


class MemoryRebind(Body):
    """Move (or merge) ``old``'s memories to ``new``, or link / unlink the two keys."""

    old: Key
    new: Key
    mode: Literal["move", "link", "unlink", "merge"] = "move"


class RebindOut(BaseModel):
    """How many records moved (or links changed)."""

    changed: int


class MemoryOut(BaseModel):
    """One memory record (without its embedding)."""

    id: str
    subject: str
    kind: str
    text: str
    tags: Tags
    importance: float
    created_at: float
    valid_from: float
    invalid_at: float | None

    @classmethod
    def of(cls, record: MemoryRecord) -> MemoryOut:
        """The wire form of ``record``."""
        return cls(
            id=record.id,
            subject=record.subject,
            kind=record.kind,
            text=record.text,
            tags=dict(record.tags),
            importance=record.importance,
            created_at=record.created_at,
            valid_from=record.valid_from,
            invalid_at=record.invalid_at,
        )


class AddOut(BaseModel):
    """The stored record; what it superseded; ``duplicate`` when it merged into an equal one."""

    record: MemoryOut
    superseded: list[str]
    duplicate: bool

    @classmethod
    def of(cls, result: AddResult) -> AddOut:
        """The wire form of ``result``."""
        return cls(
            record=MemoryOut.of(result.record), superseded=list(result.superseded), duplicate=result.duplicate
        )


class HitOut(BaseModel):
    """One recalled memory and its score."""

    record: MemoryOut
    score: float
    #: with ``explain``: structure (its reason, "" for the hybrid tier), tier, text_rank,
    #: vector_rank, fused, decay, importance, score, intent
    explain: dict[str, str | float | int | None] | None = None

    @classmethod
    def of(cls, hit: RecallHit) -> HitOut:
        """The wire form of ``hit``."""
        return cls(record=MemoryOut.of(hit.record), score=hit.score, explain=hit.explain)


class RecallOut(BaseModel):
    """Ranked memories, best first; ``degraded`` names what recall went without (e.g. vectors)."""

    items: list[HitOut]
    degraded: list[str]


class ChangeOut(BaseModel):
    """One change in a record's history."""

    seq: int
    op: str
    subject: str
    record_id: str | None
    actor: str
    at: float
    detail: str

    @classmethod
    def of(cls, change: MemoryChange) -> ChangeOut:
        """The wire form of ``change``."""
        return cls(
            seq=change.seq,
            op=change.op,
            subject=change.subject,
            record_id=change.record_id,
            actor=change.actor,
            at=change.at,
            detail=change.detail,
        )


class ChangePage(BaseModel):
    """One page of changes; pass ``next_cursor`` back as ``cursor`` for the next."""

    items: list[ChangeOut]
    next_cursor: str | None
