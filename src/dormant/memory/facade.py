"""``Memory``: the async API of long-term memory (``rt.memory`` on a runtime).

Every method runs the :class:`~dormant.memory.core.MemoryCore` operation in a
worker thread (``asyncio.to_thread``), so neither the embedder nor the database
ever blocks the event loop. Listings are paged. A ``Memory`` serves one tenant:
:data:`~dormant.memory.records.DEFAULT_TENANT` (``""``, the library's) unless it was
opened for one of the store's tenants (by name or id, looked up in the store, so a
record is always scoped by a tenant that exists); :meth:`Memory.for_tenant` gives
another tenant's view over the same core.
"""

from __future__ import annotations

import asyncio
import builtins
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UsageError
from .backend import AddResult, MemoryBackend, RebindMode
from .core import HYBRID, MemoryConfig, MemoryCore, RecallMode
from .dictionary import load_dictionary
from .embedder import Embedder, EmbedderName, resolve_embedder
from .ranking import FilterSpec
from .records import (
    DEFAULT_TENANT,
    MemoryChange,
    MemoryKind,
    MemoryPage,
    MemoryRecord,
    MemoryStatus,
    NewMemory,
    Recall,
    TagValue,
)

if TYPE_CHECKING:
    from ..store.base import Store


#: Tenant handles a memory keeps (each a few hundred bytes).
MAX_TENANT_HANDLES = 256
#: A subject: its binding key, or its identity parts (``{"phone": ..., "device": ...}``),
#: bound here by :meth:`Memory.bind`
Subject = str | Mapping[str, str]
#: The subjects a read sees: binding keys, one key, or one identity's parts
Subjects = Sequence[str] | Mapping[str, str]


async def _tenant_id(store: Store | None, tenant: str) -> str:
    """The id of the store's tenant named (or with the id) ``tenant``; ``""`` stays the default."""
    if not tenant:
        return DEFAULT_TENANT
    if store is None:
        raise UsageError("this Memory has no store to look its tenants up in")
    return (await store.tenant(tenant)).id


class Memory:
    """Long-term memory of one store: add, recall, get, history, forget, bind, rebind.

    Use as an async context manager (or call :meth:`close`).
    """

    def __init__(
        self,
        core: MemoryCore,
        *,
        tenant: str = DEFAULT_TENANT,
        owned: Store | None = None,
        store: Store | None = None,
    ) -> None:
        self.core = core
        self.tenant = tenant
        self._owned = owned
        self._store = store if store is not None else owned
        # the handles of for_tenant, shared by every handle of this memory (bounded)
        self._handles: OrderedDict[str, Memory] = OrderedDict()

    async def for_tenant(self, tenant: str) -> Memory:
        """The same memory seen by another tenant of the store (``tenant``: its name or id,
        ``""`` for the default). NotFound for a tenant the store does not have.

        This is the one way to a tenant's memory (:meth:`dormant.runtime.Runtime.memory_for`
        goes through it from a thread id). Handles are kept, the
        :data:`MAX_TENANT_HANDLES` most recently used, so a tenant's name is looked up
        in the store once, not at every slice."""
        handle = self._handles.get(tenant)
        if handle is None:
            tenant_id = await _tenant_id(self._store, tenant)
            handle = Memory(self.core, tenant=tenant_id, store=self._store)
            handle._handles = self._handles
            self._handles[tenant] = handle
            while len(self._handles) > MAX_TENANT_HANDLES:
                self._handles.popitem(last=False)
        self._handles.move_to_end(tenant)
        return handle

    @classmethod
    async def on_store(
        cls,
        store: Store,
        *,
        embedder: Embedder | EmbedderName | None = None,
        config: MemoryConfig | None = None,
        tenant: str = DEFAULT_TENANT,
    ) -> Memory:
        """Memory over an open store's rows. ``embedder``: an embedder, or ``"minilm"``
        (the default, also meant by None: loaded on first use), ``"multilingual"``
        (multilingual-e5-small, reads Chinese; the ``multilingual`` extra, UsageError
        without it), ``"hashing"`` (no model) or ``"none"`` (no vectors: recall by text,
        structure and recency). A store keeps the vectors of the embedder that made its
        first ones: another embedder is refused with UsageError.

        The store stays the caller's: :meth:`close` flushes access counts, it does not
        close the store."""
        tenant_id = await _tenant_id(store, tenant)
        backend: MemoryBackend = await asyncio.to_thread(store.memory_rows)
        return cls(MemoryCore(backend, resolve_embedder(embedder), config), tenant=tenant_id, store=store)

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        embedder: Embedder | EmbedderName | None = None,
        config: MemoryConfig | None = None,
        tenant: str = DEFAULT_TENANT,
    ) -> Memory:
        """Memory on a store URL (``sqlite:///path``, ``memory://``, ``postgresql://...``):
        opens (creating or migrating) the store, which :meth:`close` closes. ``embedder``
        as for :meth:`on_store`."""
        from ..store import open_store

        store = open_store(url)
        await store.open()
        try:
            memory = await cls.on_store(store, embedder=embedder, config=config, tenant=tenant)
        except BaseException:
            await store.close()
            raise
        memory._owned = store
        return memory

    async def __aenter__(self) -> Memory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Write pending access counts; close the store if :meth:`open` opened it."""
        try:
            await asyncio.to_thread(self.core.flush)
        finally:
            if self._owned is not None:
                store, self._owned = self._owned, None
                await store.close()

    async def add(
        self,
        subject: Subject,
        text: str,
        *,
        kind: MemoryKind = "fact",
        tags: Mapping[str, TagValue] | None = None,
        importance: float = 0.5,
        replaces: Sequence[str] = (),
        agent: str | None = None,
        thread: str | None = None,
        source_seq: int | None = None,
        valid_from: float | None = None,
        observed_at: float | None = None,
        actor: str = "api",
    ) -> AddResult:
        """Store one memory durably (returns after COMMIT); it may supersede older ones.

        ``valid_from``: when it became true; ``observed_at``: when it was seen (Unix
        seconds; each defaults to the other, then to now). Versions of a key supersede
        in ``valid_from`` order, so an older record added later is stored as history.
        ``subject``: a binding key or identity parts (bound by :meth:`bind`)."""
        (subject,) = await self._keys(subject)
        new = NewMemory(
            valid_from=valid_from,
            observed_at=observed_at,
            subject=subject,
            kind=kind,
            text=text,
            tags=dict(tags or {}),
            importance=importance,
            replaces=tuple(replaces),
            agent=agent,
            thread=thread,
            source_thread=thread,
            source_seq=source_seq,
        )
        return await asyncio.to_thread(self.core.add, self.tenant, new, actor=actor)

    async def add_many(self, memories: Sequence[NewMemory], *, actor: str = "api") -> list[AddResult]:
        """Store several memories in one transaction."""
        return await asyncio.to_thread(self.core.add_many, self.tenant, memories, actor=actor)

    async def recall(
        self,
        subject_keys: Subjects,
        query: str = "",
        *,
        tags: Mapping[str, TagValue] | None = None,
        kinds: Sequence[MemoryKind] = (),
        k: int = 5,
        at: float | None = None,
        history: bool = False,
        mode: RecallMode = HYBRID,
        now: float | None = None,
        explain: bool = False,
    ) -> Recall:
        """The best ``k`` memories of the subject(s) for ``query`` (see :meth:`MemoryCore.recall`):
        ``at`` the moment recalled (validity and decay), ``now`` the clock, ``explain``
        the parts of each hit's rank."""
        subject_keys = await self._keys(subject_keys)
        return await asyncio.to_thread(
            self.core.recall,
            self.tenant,
            subject_keys,
            query,
            kinds=kinds,
            tags=tags,
            k=k,
            at=at,
            history=history,
            mode=mode,
            now=now,
            explain=explain,
        )

    async def get(self, subject_keys: Subjects, record_id: str) -> MemoryRecord:
        """One record of the subject(s); NotFound outside the scope."""
        keys = await self._keys(subject_keys)
        return await asyncio.to_thread(self.core.get, self.tenant, keys, record_id)

    async def list(
        self,
        subject_keys: Subjects,
        *,
        spec: FilterSpec | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> MemoryPage[MemoryRecord]:
        """The subject's records, newest first, one page."""
        subject_keys = await self._keys(subject_keys)
        return await asyncio.to_thread(
            self.core.list, self.tenant, subject_keys, spec=spec, cursor=cursor, limit=limit
        )

    async def history(
        self,
        subject_keys: Subjects,
        *,
        record_id: str | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> MemoryPage[MemoryChange]:
        """The history of the subject (or of one record), oldest first, one page."""
        subject_keys = await self._keys(subject_keys)
        return await asyncio.to_thread(
            self.core.history, self.tenant, subject_keys, record_id=record_id, cursor=cursor, limit=limit
        )

    async def forget(
        self, subject_keys: Subjects, record_id: str, *, reason: str = "", actor: str = "api"
    ) -> None:
        """Invalidate one record (kept in the history)."""
        keys = await self._keys(subject_keys)
        await asyncio.to_thread(self.core.forget, self.tenant, keys, record_id, actor=actor, reason=reason)

    async def _keys(self, subjects: Subjects | str) -> builtins.list[str]:
        """Binding keys of ``subjects``: keys as given, identity parts bound by :meth:`bind`."""
        if isinstance(subjects, Mapping):
            return [await self.bind(subjects)]
        return [subjects] if isinstance(subjects, str) else builtins.list(subjects)

    async def bind(self, parts: Mapping[str, str]) -> str:
        """The binding key of identity ``parts`` (registered for partial lookups through links)."""
        return await asyncio.to_thread(self.core.bind, self.tenant, parts)

    async def keys_for(
        self, part: str, value: str, *, cursor: str | None = None, limit: int = 50
    ) -> MemoryPage[str]:
        """The keys bound with one identity part (e.g. a phone), one page."""
        return await asyncio.to_thread(
            self.core.keys_for, self.tenant, part, value, cursor=cursor, limit=limit
        )

    async def rebind(self, old: str, new: str, *, mode: RebindMode = "move", actor: str = "api") -> int:
        """Move/merge ``old``'s memories to ``new``, or link/unlink the keys (audited)."""
        return await asyncio.to_thread(self.core.rebind, self.tenant, old, new, mode=mode, actor=actor)

    async def load_dictionary(self, source: Path | Sequence[Sequence[str]]) -> int:
        """Replace the tenant's synonym groups from a file (JSON/TOML/CSV) or a list of groups."""
        groups = load_dictionary(source) if isinstance(source, Path) else [list(g) for g in source]
        return await asyncio.to_thread(self.core.save_dictionary, self.tenant, groups)

    async def dictionary(self) -> builtins.list[builtins.list[str]]:
        """The tenant's synonym groups, as stored."""
        return await asyncio.to_thread(self.core.dictionary_groups, self.tenant)

    def status(self) -> MemoryStatus:
        """The embedder (loaded or not, its RSS) and whether vector search works."""
        embedder = self.core.embedder
        # a model-less embedder (hashing) has nothing to load
        loaded = bool(getattr(embedder, "loaded", True)) if embedder is not None else False
        return MemoryStatus(
            embedder=embedder.name if embedder is not None else None,
            embedder_loaded=loaded,
            embedder_rss_bytes=embedder.rss_bytes if embedder is not None else 0,
            vector_available=self.core.backend.vector_available,
        )
