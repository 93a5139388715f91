"""The domain rules of long-term memory, over a :class:`~dormant.memory.backend.MemoryBackend`.

:class:`MemoryCore` owns every rule once: validation and size limits, the scope
(tenant + binding keys, widened only by explicit links; the tenant is the store's
own tenant id, ``""`` for the default, and a record's thread must be of its tenant), dedup by content hash,
supersession (:class:`~dormant.memory.ranking.SupersessionRules`, applied inside
the backend's transaction), embeddings with the dictionary pull, the hybrid
recall and its ranking, paging cursors. Its methods are synchronous and may
block (the embedder, the database): :class:`~dormant.memory.facade.Memory` runs
them in a worker thread.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import msgspec

from ..errors import InvalidInput, NotFound, UsageError
from ..tenants.keys import check_tenant_id
from ..tenants.scope import tenant_of
from .access import AccessCounts
from .backend import AddItem, AddResult, Forget, MemoryBackend, MemoryWrites, RebindMode, Search
from .binding import (
    bind,
    check_key,
    check_secret,
    legacy_bind,
    legacy_part_hashes,
    part_hash,
    part_hashes,
)
from .dictionary import DEFAULT_PULL_WEIGHT, EMPTY, Dictionary
from .embedder import Embedder
from .fulltext import mostly_cjk, query_terms
from .intent import DEFAULT_VOCABULARY, NONE, IntentVocabulary, read_intent
from .qcache import QueryCache
from .ranking import Candidate, FilterSpec, RankingPolicy, SupersessionRules, check_tags, rank
from .records import (
    MEMORY_KINDS,
    MemoryChange,
    MemoryKind,
    MemoryPage,
    MemoryRecord,
    NewMemory,
    Recall,
    TagValue,
)
from .structure import order, recall_hits

MAX_TEXT_CHARS = 8_000
MAX_K = 100
MAX_PAGE = 500
MAX_BATCH = 1_000
DICTIONARY_CACHE_TENANTS = 64
#: the newest records a structural question or a text-only fallback reads per recall
STRUCTURE_ROWS = 200


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryConfig:
    """The knobs of memory: ranking, supersession, limits."""

    ranking: RankingPolicy = field(default_factory=RankingPolicy)
    rules: SupersessionRules = field(default_factory=SupersessionRules)
    max_scope_keys: int = 64
    #: candidates fetched from each list per requested hit (at least 50)
    candidate_factor: int = 10
    touch_on_recall: bool = True
    #: weight of the dictionary's pull (the normalized group vector added to an embedding)
    pull_weight: float = DEFAULT_PULL_WEIGHT
    #: pull the stored records' embeddings too, not only a query's. Off: a record's vector
    #: is its text's own, so the dictionary changes nothing for a query that names no
    #: group (pulling records moved every record with a synonym towards every query:
    #: measured in BENCHMARKS.md)
    pull_records: bool = False
    #: accesses are counted in batches of this many records (one write per batch, not per
    #: recall, by a thread of its own: :mod:`~dormant.memory.access`); a crash loses at
    #: most a few batches of counts, never a record
    touch_batch: int = 256
    #: the binding secret binding keys are made under (at least 32 characters); None: the
    #: ``DORMANT_BINDING_SECRET`` environment variable, or else the store's own secret
    #: (made with the store). Changing it changes every key: see docs/memory.md, rotation
    binding_secret: str | None = field(default=None, repr=False)
    #: the previous binding secret while rotating: a key made under it is moved to the
    #: current secret's key when its identity is next bound. None:
    #: ``DORMANT_BINDING_SECRET_PREVIOUS``, or none
    previous_binding_secret: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class RecallMode:
    """Which parts of hybrid recall run (the benchmark's baselines switch them off)."""

    text: bool = True
    vector: bool = True
    dictionary: bool = True
    ranking: RankingPolicy | None = None
    #: answer what structure can first (:mod:`~dormant.memory.structure`): the current
    #: value of a key, the newest event of a kind; and fall back to recency when text
    #: finds nothing
    structure: bool = True


HYBRID = RecallMode()


def content_hash(kind: str, text: str, tags: Mapping[str, TagValue]) -> str:
    """sha256 of the kind, the whitespace- and case-normalized text and the sorted typed tags."""
    norm = " ".join(text.split()).casefold()
    payload = msgspec.json.encode([kind, norm, sorted((k, type(v).__name__, v) for k, v in tags.items())])
    return hashlib.sha256(payload).hexdigest()


def _cursor_int(cursor: str | None) -> int | None:
    if cursor is None:
        return None
    try:
        return int(cursor)
    except ValueError:
        raise InvalidInput(f"bad cursor {cursor!r:.40}") from None


class MemoryCore:
    """Memory operations with their rules; storage through ``backend``, vectors through ``embedder``.

    ``embedder=None`` stores no vectors and recalls by text + structure.
    """

    def __init__(self, backend: MemoryBackend, embedder: Embedder | None, config: MemoryConfig | None = None):
        self.backend = backend
        self.embedder = embedder
        self.config = config or MemoryConfig()
        self._dicts: OrderedDict[str, Dictionary] = OrderedDict()
        self._vocabs: OrderedDict[int, tuple[Dictionary, IntentVocabulary]] = OrderedDict()
        #: query vectors by text (bounded by entries and bytes)
        self.queries = QueryCache()
        self._embedder_checked = False
        #: access counts of recalled records, written in batches off recall's path
        self.accesses = AccessCounts(backend.touch, self.config.touch_batch)
        self._secrets: tuple[bytes, bytes | None, bool] | None = None
        self._secrets_lock = threading.Lock()

    def _binding_secrets(self) -> tuple[bytes, bytes | None, bool]:
        """(the binding secret, the previous one or None, whether keys of the previous
        scheme may exist here), read once."""
        with self._secrets_lock:
            if self._secrets is None:
                stored, legacy = self.backend.binding_meta()
                chosen = self.config.binding_secret or os.environ.get("DORMANT_BINDING_SECRET") or stored
                previous = self.config.previous_binding_secret or os.environ.get(
                    "DORMANT_BINDING_SECRET_PREVIOUS"
                )
                self._secrets = (
                    check_secret(chosen),
                    check_secret(previous) if previous else None,
                    legacy,
                )
            return self._secrets

    # -- helpers --------------------------------------------------------------------------

    def _keys(self, keys: Sequence[str]) -> list[str]:
        if isinstance(keys, str):
            keys = [keys]
        if not keys:
            raise InvalidInput("a memory operation needs at least one binding key")
        if len(keys) > self.config.max_scope_keys:
            raise InvalidInput(f"at most {self.config.max_scope_keys} binding keys")
        return [check_key(k) for k in keys]

    def scope(self, tenant: str, keys: Sequence[str]) -> list[str]:
        """The keys a read may see: ``keys`` (through moves) and the keys explicitly linked to them."""
        check_tenant_id(tenant)
        return self.backend.resolve_scope(tenant, self._keys(keys), self.config.max_scope_keys)

    def dictionary_groups(self, tenant: str) -> list[list[str]]:
        """The tenant's synonym groups as stored (the dictionary read back)."""
        check_tenant_id(tenant)
        return [list(g) for g in self.backend.load_dictionary(tenant)]

    def dictionary(self, tenant: str) -> Dictionary:
        """The tenant's dictionary (cached for :data:`DICTIONARY_CACHE_TENANTS` tenants)."""
        check_tenant_id(tenant)
        d = self._dicts.get(tenant)
        if d is None:
            groups = self.backend.load_dictionary(tenant)
            d = Dictionary(groups, pull_weight=self.config.pull_weight) if groups else EMPTY
            self._dicts[tenant] = d
            while len(self._dicts) > DICTIONARY_CACHE_TENANTS:
                self._dicts.popitem(last=False)
        else:
            self._dicts.move_to_end(tenant)
        return d

    def _embed(self, tenant: str, texts: Sequence[str], pull: bool) -> list[tuple[float, ...]] | None:
        if self.embedder is None or not self.backend.vector_available:
            return None
        if not self._embedder_checked:
            self.backend.check_embedder(self.embedder.name, self.embedder.dim)
            self._embedder_checked = True
        vecs = self.embedder.embed(texts)
        if pull:
            d = self.dictionary(tenant)
            if len(d):
                vecs = [d.pull(t, v, self.embedder.embed) for t, v in zip(texts, vecs, strict=True)]
        return vecs

    def flush(self) -> None:
        """Write the access counts not written yet (call before closing)."""
        self.accesses.flush()

    # -- writes ---------------------------------------------------------------------------

    def build(self, tenant: str, new: NewMemory, now: float) -> MemoryRecord:
        """Validate ``new`` into a record (no I/O): InvalidInput for a malformed tenant id,
        or a thread of another tenant than ``tenant``."""
        check_tenant_id(tenant)
        check_key(new.subject)
        for thread in (new.thread, new.source_thread):
            if thread is not None and tenant_of(thread) != tenant:
                raise InvalidInput(f"thread {thread!r:.80} is not a thread of this memory's tenant")
        if new.kind not in MEMORY_KINDS:
            raise InvalidInput(f"unknown memory kind {new.kind!r}")
        text = new.text.strip()
        if not text:
            raise InvalidInput("a memory needs text")
        if len(text) > MAX_TEXT_CHARS:
            raise InvalidInput(
                f"a memory's text is at most {MAX_TEXT_CHARS} chars (chunk knowledge documents)"
            )
        if not 0.0 <= new.importance <= 1.0:
            raise InvalidInput("importance must be within 0..1")
        tags = check_tags(new.tags)
        rules = self.config.rules
        if rules.key_tag in tags and not rules.by_kind.get(new.kind, False):
            raise InvalidInput(
                f"a {new.kind!r} record never supersedes, so it cannot carry the key tag "
                f"{rules.key_tag!r} (use a kind that supersedes, such as 'fact', or another tag name)"
            )
        for name, value in (("valid_from", new.valid_from), ("observed_at", new.observed_at)):
            if value is not None and not 0.0 <= value < 1e11:
                raise InvalidInput(f"{name} must be Unix seconds, got {value!r}")
        observed = new.observed_at if new.observed_at is not None else new.valid_from
        observed = now if observed is None else observed
        valid_from = observed if new.valid_from is None else new.valid_from
        return MemoryRecord(
            id=uuid.uuid4().hex,
            tenant=tenant,
            subject=new.subject,
            kind=new.kind,
            text=text,
            tags=tags,
            agent=new.agent,
            thread=new.thread,
            importance=new.importance,
            source_thread=new.source_thread,
            source_seq=new.source_seq,
            created_at=observed,
            valid_from=valid_from,
            content_hash=content_hash(new.kind, text, tags),
        )

    def prepare_writes(
        self,
        tenant: str,
        news: Sequence[NewMemory],
        forgets: Sequence[tuple[Sequence[str], str, str]] = (),
        *,
        actor: str = "system",
        now: float | None = None,
    ) -> MemoryWrites:
        """Records built, validated and embedded, and forgets scoped (``(keys, record id,
        reason)``), ready to be written by :meth:`MemoryBackend.add_many` or in a slice's
        commit (``CommitPlan.memory``). Blocks (the embedder, the scope reads): call it
        off the event loop. InvalidInput for a malformed record."""
        if len(news) > MAX_BATCH or len(forgets) > MAX_BATCH:
            raise InvalidInput(f"at most {MAX_BATCH} memories per call")
        t = time.time() if now is None else now
        records = [self.build(tenant, n, t) for n in news]
        vecs = (
            self._embed(tenant, [r.text for r in records], pull=self.config.pull_records) if records else None
        )
        items = tuple(
            AddItem(r, self.config.rules.key_of(r.kind, r.tags), vecs[i] if vecs else None, n.replaces)
            for i, (r, n) in enumerate(zip(records, news, strict=True))
        )
        rules = self.config.rules
        replaces = {i.record.id: i.replaces for i in items if i.replaces}

        def decide(new: MemoryRecord, olds: Sequence[MemoryRecord]) -> tuple[list[str], float | None]:
            # versions of a key in valid_from order: the new record supersedes the older
            # ones and is itself superseded by the first newer one (a back-fill is history)
            probe = NewMemory(
                subject=new.subject,
                kind=new.kind,
                text=new.text,
                tags=new.tags,
                replaces=replaces.get(new.id, ()),
            )
            gone: list[str] = []
            until: float | None = None
            for o in olds:
                if o.id in probe.replaces:
                    gone.append(o.id)
                elif not rules.supersedes(o, probe):
                    continue
                elif o.valid_from > new.valid_from:
                    until = o.valid_from if until is None else min(until, o.valid_from)
                else:
                    gone.append(o.id)
            return gone, until

        gone = tuple(
            Forget(tuple(self.scope(tenant, keys)), record_id, reason[:500], t)
            for keys, record_id, reason in forgets
        )
        return MemoryWrites(tenant=tenant, actor=actor, adds=items, forgets=gone, decide=decide)

    def add_many(
        self, tenant: str, news: Sequence[NewMemory], *, actor: str = "system", now: float | None = None
    ) -> list[AddResult]:
        """Add records in one transaction: dedup, supersession, history, text and vector index."""
        writes = self.prepare_writes(tenant, news, actor=actor, now=now)
        return self.backend.add_many(tenant, writes.adds, writes.decide, actor)

    def add(
        self, tenant: str, new: NewMemory, *, actor: str = "system", now: float | None = None
    ) -> AddResult:
        """Add one record (see :meth:`add_many`)."""
        return self.add_many(tenant, [new], actor=actor, now=now)[0]

    def forget(
        self,
        tenant: str,
        keys: Sequence[str],
        record_id: str,
        *,
        actor: str = "system",
        reason: str = "",
        now: float | None = None,
    ) -> None:
        """Invalidate one record of the subject (it stays in the history). NotFound when not in scope."""
        scope = self.scope(tenant, keys)
        if not self.backend.forget(
            tenant, scope, record_id, time.time() if now is None else now, actor, reason[:500]
        ):
            raise NotFound(f"no valid memory {record_id!r} for this subject")

    def bind(self, tenant: str, parts: Mapping[str, str], *, now: float | None = None) -> str:
        """The binding key of ``parts`` in ``tenant`` (a keyed hash: :func:`~.binding.bind`);
        each part's keyed hash is linked to it for partial lookups.

        A key the same identity had before (under the previous scheme, ``b1_``, in a
        store made before keys were keyed; or under the previous secret while one is
        being rotated out) is moved to the new key first, once, in one transaction:
        its memories and their history, its links, and the subject of its threads
        (journaled) — so nothing bound to the identity is lost."""
        check_tenant_id(tenant)
        secret, previous, legacy = self._binding_secrets()
        key = bind(parts, secret=secret, tenant=tenant)
        olds: list[tuple[str, dict[str, str]]] = []
        if previous is not None and previous != secret:
            was = bind(parts, secret=previous, tenant=tenant)
            olds.append((was, part_hashes(parts, secret=previous, tenant=tenant)))
        if legacy:
            olds.append((legacy_bind(parts), legacy_part_hashes(parts)))
        t = time.time() if now is None else now
        for old, hashes in olds:
            self.backend.migrate_key(tenant, old, key, hashes, t, "binding-migration")
        self.backend.register_identity(tenant, key, part_hashes(parts, secret=secret, tenant=tenant))
        return key

    def key(self, tenant: str, parts: Mapping[str, str]) -> str:
        """The binding key of ``parts`` in ``tenant``, without recording it or moving an old key
        (:meth:`bind` does both)."""
        check_tenant_id(tenant)
        return bind(parts, secret=self._binding_secrets()[0], tenant=tenant)

    def rebind(
        self,
        tenant: str,
        old: str,
        new: str,
        *,
        mode: RebindMode = "move",
        actor: str = "system",
        now: float | None = None,
    ) -> int:
        """Move (or merge) ``old``'s memories to ``new`` — later writes to ``old`` land on ``new`` —
        or link/unlink the two keys. Audited in the history."""
        check_tenant_id(tenant)
        if mode not in ("move", "link", "unlink", "merge"):
            raise InvalidInput(f"unknown rebind mode {mode!r}")
        check_key(old)
        check_key(new)
        if old == new:
            raise UsageError("old and new binding keys are the same")
        return self.backend.rebind(tenant, old, new, mode, time.time() if now is None else now, actor)

    def save_dictionary(self, tenant: str, groups: Sequence[Sequence[str]]) -> int:
        """Replace the tenant's synonym groups (validated first); returns their number."""
        check_tenant_id(tenant)
        d = Dictionary(groups)
        self.backend.save_dictionary(tenant, [list(g) for g in d.groups])
        self._dicts.pop(tenant, None)
        self.queries.clear()  # pulled query vectors depend on the dictionary
        return len(d)

    # -- reads ----------------------------------------------------------------------------

    def recall(
        self,
        tenant: str,
        keys: Sequence[str],
        query: str = "",
        *,
        kinds: Sequence[MemoryKind] = (),
        tags: Mapping[str, TagValue] | None = None,
        k: int = 5,
        at: float | None = None,
        history: bool = False,
        now: float | None = None,
        mode: RecallMode = HYBRID,
        explain: bool = False,
    ) -> Recall:
        """The ``k`` best records of the subject for ``query``, valid now (or at ``at``).

        Structure filters in SQL; what the question asks of structure is answered first
        (:mod:`~dormant.memory.intent`, :mod:`~dormant.memory.structure`); text and
        vector rank the rest, fusion x decay x importance. ``at`` is the moment recalled:
        validity is judged at it and decay measured from it; ``now`` is the clock
        (default: the time of the call), used for both when ``at`` is None.
        ``explain=True`` fills each hit's ``explain`` with the parts of its rank.
        """
        if not 1 <= k <= MAX_K:
            raise InvalidInput(f"k must be within 1..{MAX_K}")
        t = time.time() if now is None else now
        spec = FilterSpec(kinds=frozenset(kinds), tags=dict(tags or {}), at=at, history=history)
        scope = self.scope(tenant, keys)
        policy = mode.ranking or self.config.ranking
        d = self.dictionary(tenant) if mode.dictionary else EMPTY
        terms = None
        if mode.text and query.strip():
            groups = [(term,) for term in query_terms(query)] + [tuple(g) for g in d.expand(query)]
            terms = tuple(groups) if groups else None
        vector = None
        degraded: list[str] = []
        if mode.vector and query.strip():
            if self.embedder is None:
                degraded.append("no embedder configured: text + structure only")
            elif not getattr(self.embedder, "reads_cjk", True) and mostly_cjk(query):
                degraded.append(f"{self.embedder.name} does not read CJK text: text + structure only")
            else:
                vector = self.queries.get(tenant, mode.dictionary, query)
                vecs = [vector] if vector is not None else self._embed(tenant, [query], pull=mode.dictionary)
                if vecs and vector is None:
                    vector = vecs[0]
                    self.queries.put(tenant, mode.dictionary, query, vector)
                if vecs is None:
                    degraded.append("vector index unavailable (sqlite-vec not loaded): text + structure only")
        n = max(50, k * self.config.candidate_factor)
        search = Search(
            spec=spec,
            now=t,
            terms=terms,
            vector=vector,
            text_limit=n,
            vector_limit=n,
            recent_limit=n if terms is None and vector is None else 0,
        )
        cands, more = self.backend.candidates(tenant, scope, search)
        ref = t if at is None else at
        intent = read_intent(query, self._vocabulary(d)) if mode.structure else NONE
        others: list[Candidate] = []
        if mode.structure and (intent.structural or (not cands and search.recent_limit == 0)):
            # the subject's newest records: structure's answers, or recency when text found nothing
            recent = replace(search, terms=None, vector=None, recent_limit=STRUCTURE_ROWS)
            seen = {c.record.id for c in cands}
            others = [c for c in self.backend.candidates(tenant, scope, recent)[0] if c.record.id not in seen]
        if not cands:  # the hybrid tier takes the newest records only when nothing matched
            cands, others = others, []
        rules = self.config.rules
        ranked = order(
            rank(cands, policy, now=ref, k=len(cands)),
            intent,
            ref=ref,
            k=k,
            key_tag=rules.key_tag,
            type_tag=rules.type_tag,
            extra=rank(others, policy, now=ref, k=len(others)),
        )
        if self.config.touch_on_recall and ranked:
            self.accesses.add(tenant, [s.candidate.record.id for s, _ in ranked], t)
        hits = recall_hits(ranked, intent, explain=explain)
        return Recall(hits=hits, degraded=tuple(dict.fromkeys([*degraded, *more])))

    def _vocabulary(self, d: Dictionary) -> IntentVocabulary:
        """The intent vocabulary extended by dictionary ``d`` (kept per dictionary)."""
        if not len(d):
            return DEFAULT_VOCABULARY
        vocab = self._vocabs.get(id(d))
        if vocab is None or vocab[0] is not d:
            vocab = (d, DEFAULT_VOCABULARY.extended(d.groups))
            self._vocabs[id(d)] = vocab
            while len(self._vocabs) > DICTIONARY_CACHE_TENANTS:
                self._vocabs.popitem(last=False)
        return vocab[1]

    def get(
        self, tenant: str, keys: Sequence[str], record_id: str, *, with_vector: bool = False
    ) -> MemoryRecord:
        """One record of the subject; NotFound when it does not exist or is outside the scope."""
        found = self.backend.get(tenant, self.scope(tenant, keys), [record_id], with_vector)
        if not found:
            raise NotFound(f"no memory {record_id!r} for this subject")
        return found[0]

    def list(
        self,
        tenant: str,
        keys: Sequence[str],
        *,
        spec: FilterSpec | None = None,
        cursor: str | None = None,
        limit: int = 50,
        now: float | None = None,
    ) -> MemoryPage[MemoryRecord]:
        """The subject's records, newest first, one page."""
        limit = max(1, min(limit, MAX_PAGE))
        items, nxt = self.backend.list_records(
            tenant,
            self.scope(tenant, keys),
            spec or FilterSpec(),
            time.time() if now is None else now,
            _cursor_int(cursor),
            limit,
        )
        return MemoryPage(items=tuple(items), next_cursor=None if nxt is None else str(nxt))

    def history(
        self,
        tenant: str,
        keys: Sequence[str],
        *,
        record_id: str | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> MemoryPage[MemoryChange]:
        """Changes of the subject (or of one of its records), oldest first, one page."""
        limit = max(1, min(limit, MAX_PAGE))
        after = _cursor_int(cursor) or 0
        rows = self.backend.history(tenant, self.scope(tenant, keys), record_id, after, limit + 1)
        nxt = str(rows[limit - 1].seq) if len(rows) > limit else None
        return MemoryPage(items=tuple(rows[:limit]), next_cursor=nxt)

    def keys_for(
        self, tenant: str, part: str, value: str, *, cursor: str | None = None, limit: int = 50
    ) -> MemoryPage[str]:
        """Binding keys made with one identity part (e.g. every key with this phone), one page."""
        check_tenant_id(tenant)
        limit = max(1, min(limit, MAX_PAGE))
        secret, _, legacy = self._binding_secrets()
        hashed = part_hash(part, value, secret=secret, tenant=tenant)
        rows = self.backend.keys_for_part(tenant, part, hashed, cursor or "", limit + 1)
        if legacy:  # identities not bound since the store's keys became keyed hashes
            old = legacy_part_hashes({part: value})[part]
            more = self.backend.keys_for_part(tenant, part, old, cursor or "", limit + 1)
            rows = sorted(set(rows) | set(more))[: limit + 1]
        return MemoryPage(
            items=tuple(rows[:limit]), next_cursor=rows[limit - 1] if len(rows) > limit else None
        )
