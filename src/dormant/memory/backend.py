"""The narrow interface a memory backend implements: it moves rows, it decides nothing.

Every domain rule (validation, scope, supersession, dedup, ranking) is in
:class:`~dormant.memory.core.MemoryCore`. A backend runs each operation in one
transaction and translates driver errors into :class:`~dormant.errors.StoreError`;
where a rule must be applied inside the transaction (which older records a new
one supersedes), the core passes it in as a pure function. Methods are
synchronous: the core calls them in a worker thread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from .ranking import Candidate, FilterSpec
from .records import MemoryChange, MemoryRecord

Vector = tuple[float, ...]
#: Given the records that share the new record's key and are valid at or after its
#: ``valid_from`` (and those it names as replaced): the ids the new record supersedes
#: (each invalidated at the new record's ``valid_from``), and the time the new record
#: itself stops being valid (a newer version exists already: a back-filled older
#: record is stored as history), or None.
Decide = Callable[[MemoryRecord, Sequence[MemoryRecord]], tuple[Sequence[str], float | None]]
RebindMode = Literal["move", "link", "unlink", "merge"]


@dataclass(frozen=True, slots=True)
class AddItem:
    """One record to write: built and validated by the core."""

    record: MemoryRecord
    key: str | None
    vector: Vector | None
    replaces: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Forget:
    """One record to invalidate: ``keys`` is the scope the core resolved for it."""

    keys: tuple[str, ...]
    record_id: str
    reason: str
    at: float


@dataclass(frozen=True, slots=True)
class MemoryWrites:
    """A slice's memory writes, ready for its commit (``CommitPlan.memory``): built,
    validated and embedded by :meth:`MemoryCore.prepare_writes
    <dormant.memory.core.MemoryCore.prepare_writes>` before the commit, so a store's
    commit only moves rows (dedup, supersession by ``decide``, history with ``actor``),
    in the slice's own transaction. A forget of a record that is no longer valid at
    commit changes nothing (another writer invalidated it first)."""

    tenant: str
    actor: str
    adds: tuple[AddItem, ...]
    forgets: tuple[Forget, ...]
    decide: Decide

    @property
    def size(self) -> int:
        """Bytes it holds, roughly (for write-queue bounds)."""
        adds = sum(len(i.record.text) + 8 * len(i.vector or ()) + 512 for i in self.adds)
        return adds + sum(len(f.reason) + 128 for f in self.forgets)


@dataclass(frozen=True, slots=True)
class AddResult:
    """What an add did: the stored record, what it superseded, or the duplicate it merged into."""

    record: MemoryRecord
    superseded: tuple[str, ...] = ()
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class Search:
    """One recall's search: the structural filter plus the text and vector queries."""

    spec: FilterSpec
    now: float
    #: the text query: groups of alternative terms (a word and its synonyms), OR-ed
    terms: tuple[tuple[str, ...], ...] | None
    vector: Vector | None
    text_limit: int
    vector_limit: int
    recent_limit: int


class MemoryBackend(Protocol):
    """Row operations of one database dialect (see the module docstring)."""

    @property
    def vector_available(self) -> bool:
        """Whether vector search works here (the extension loaded)."""
        ...

    def check_embedder(self, name: str, dim: int) -> None:
        """Record the embedder of this memory on first use; UsageError if another one made its vectors."""
        ...

    def close(self) -> None:
        """Release the connection(s)."""
        ...

    def add_many(self, tenant: str, items: Sequence[AddItem], decide: Decide, actor: str) -> list[AddResult]:
        """Write records in one transaction, each superseding what ``decide`` says."""
        ...

    def resolve_scope(self, tenant: str, keys: Sequence[str], max_keys: int) -> list[str]:
        """``keys`` through moves, plus the keys explicitly linked to them (one hop), at most ``max_keys``."""
        ...

    def candidates(
        self, tenant: str, keys: Sequence[str], search: Search
    ) -> tuple[list[Candidate], list[str]]:
        """Records passing the filter, with their text and vector ranks; and what degraded."""
        ...

    def touch(self, tenant: str, accesses: Sequence[tuple[str, float]]) -> None:
        """Count each ``(record id, time)`` access, in one transaction."""
        ...

    def get(
        self, tenant: str, keys: Sequence[str], ids: Sequence[str], with_vectors: bool
    ) -> list[MemoryRecord]:
        """The records among ``ids`` that belong to ``keys``."""
        ...

    def list_records(
        self, tenant: str, keys: Sequence[str], spec: FilterSpec, now: float, before: int | None, limit: int
    ) -> tuple[list[MemoryRecord], int | None]:
        """Newest first, ``limit`` at most, and the cursor of the next page."""
        ...

    def history(
        self, tenant: str, keys: Sequence[str], record_id: str | None, after: int, limit: int
    ) -> list[MemoryChange]:
        """Changes of the subjects (or of one of their records) after ``after``, oldest first."""
        ...

    def forget(
        self, tenant: str, keys: Sequence[str], record_id: str, now: float, actor: str, reason: str
    ) -> bool:
        """Invalidate one valid record of the subjects; False when there is none."""
        ...

    def rebind(self, tenant: str, old: str, new: str, mode: RebindMode, now: float, actor: str) -> int:
        """Move, merge, link or unlink two keys; returns the records moved (or links changed)."""
        ...

    def binding_meta(self) -> tuple[str, bool]:
        """The store's binding secret (made at the store's creation, or here if missing) and
        whether the store may hold keys of the previous scheme (it had memories or
        subjects when it was migrated to keyed binding keys)."""
        ...

    def migrate_key(
        self, tenant: str, old: str, new: str, legacy: dict[str, str], now: float, actor: str
    ) -> int | None:
        """In one transaction: drop ``old``'s link rows of the previous scheme's part
        hashes ``legacy`` (part → hash), and when key ``old`` is known here and not moved yet,
        move it to ``new`` like ``rebind(mode="move")`` (records, history, identity rows),
        with its links, and journal ``new`` as the subject of the threads whose subject
        was ``old``. The records moved; None when nothing was moved."""
        ...

    def register_identity(self, tenant: str, key: str, parts: dict[str, str]) -> None:
        """Remember which key each identity part's hash was bound into."""
        ...

    def keys_for_part(self, tenant: str, part: str, part_hash: str, after: str, limit: int) -> list[str]:
        """Keys bound with one identity part, in key order after ``after``."""
        ...

    def save_dictionary(self, tenant: str, groups: Sequence[Sequence[str]]) -> None:
        """Replace the tenant's synonym groups."""
        ...

    def load_dictionary(self, tenant: str) -> list[list[str]]:
        """The tenant's synonym groups."""
        ...
