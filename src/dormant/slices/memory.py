"""Memory in the agent loop: the I/O around a slice of a subject's thread.

Before the model call, :meth:`LoopMemory.prepare` finds the thread's subject and
registers, recalls the subject's top memories for the newest inputs, and renders the
"state" and "memories" sections within the page manager's shares of the budget
(:mod:`dormant.view.pages`, :mod:`dormant.view.sections`). It hands the slice's tools a
:class:`SubjectMemory`: ``recall`` reads now; ``remember``, ``forget`` and long-term
state are *queued*, built and embedded before the commit (:meth:`LoopMemory.seal`) and
written by the store in the slice's own transaction (``CommitPlan.memory``), so a
failed slice leaves no memory behind and a committed one loses none. The short-term
register is the thread's state journal (:mod:`dormant.memory.registers`), which commits in
the same transaction.

The registers are the thread's journal state, read from its row with the slice's load
(``SliceLoad.state``) at no extra query, and written back on the row by the slice's
commit (``CommitPlan.state_json``, same transaction as the change records); only a row
that does not carry it (over its bound, or last written before rows carried it)
replays the journal.

The text of what the user sent as images and files (alt text, OCR, a PDF's text:
:mod:`dormant.parts`) is remembered the way a durable fact is: each part with text
becomes ``event`` memories of the subject (:func:`part_memories`: type ``attachment``,
the part's name, kind and blob, valid from when the input was admitted), queued by
:meth:`LoopMemory.prepare` and written with the slice's commit, so a later "the invoice
number in the photo I sent last week" recalls it. The same content sent again is merged
into its record (dedup by content). ``SubjectOptions(remember_parts=False)`` turns it off.

An agent without a subject never reaches this module: no recall, no reads, no cost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

from ..errors import InvalidInput
from ..journal import rules as journal
from ..memory import registers, state_events
from ..memory.chunking import chunk_text
from ..memory.core import HYBRID, RecallMode
from ..memory.facts import Fact
from ..memory.records import MemoryKind, MemoryRecord, NewMemory, Recall
from ..records import CommitPlan, Input, NewInput, SliceLoad
from ..store.rows import state_row
from ..subject import SubjectOptions
from ..tenants.scope import tenant_of
from ..view import sections

if TYPE_CHECKING:
    from ..memory.facade import Memory
    from ..store.base import Store

log = logging.getLogger("dormant.runtime")

__all__ = ["LoopMemory", "Prepared", "SubjectMemory"]

#: Characters of the newest inputs a recall query takes (the tail: the newest words).
QUERY_CHARS = 1000
#: Tag of a long-term register record (its key tag is ``lsr:<key>``).
LSR_TAG = "register"
LSR_KEY_PREFIX = "lsr:"
#: Long-term register entries read per slice at most.
PROFILE_LIMIT = 20
#: The memory kind of a fact's kind (facts.FACT_KINDS).
_KINDS: dict[str, MemoryKind] = {
    "fact": "fact",
    "preference": "preference",
    "event": "event",
    "profile": "profile",
}
#: Memories one part's text becomes at most (chunks of PART_CHUNK_CHARS), and one slice's
#: parts at most (the rest of a long PDF stays in the part, read by its blob).
PART_CHUNKS = 4
PART_CHUNK_CHARS = 1_200
SLICE_PART_MEMORIES = 32
#: The type tag of a part's memories (the recall intent's "attachment" topic).
ATTACHMENT = "attachment"
#: Automatic recall without vectors (SubjectOptions.recall_vectors False).
TEXT_ONLY = RecallMode(vector=False)


@dataclass
class SubjectMemory:
    """What a slice's tools may do with its subject's memory (and only its subject's:
    no method takes a subject). Writes are queued until the slice commits."""

    subject: str
    thread_id: str
    agent: str
    memory: Memory
    adds: list[NewMemory] = field(default_factory=list)
    forgets: list[tuple[str, str]] = field(default_factory=list)
    #: long-term register changes, ``(key, JSON value or None)``: fanned out at commit
    changes: list[tuple[str, str | None]] = field(default_factory=list)

    async def recall(
        self, query: str, *, tags: Mapping[str, str | int | float | bool] | None = None, k: int = 5
    ) -> Recall:
        """The subject's best ``k`` valid memories for ``query``."""
        return await self.memory.recall([self.subject], query, tags=dict(tags or {}), k=k)

    def remember(
        self,
        text: str,
        *,
        tags: Mapping[str, str | int | float | bool] | None = None,
        kind: MemoryKind = "fact",
        importance: float = 0.5,
        source_seq: int | None = None,
    ) -> None:
        """Queue a memory of the subject (written when the slice commits)."""
        self.adds.append(
            NewMemory(
                subject=self.subject,
                text=text,
                kind=kind,
                tags=dict(tags or {}),
                importance=importance,
                agent=self.agent,
                thread=self.thread_id,
                source_thread=self.thread_id,
                source_seq=source_seq,
            )
        )

    async def forget(self, record_id: str, reason: str) -> None:
        """Queue superseding one of the subject's records (NotFound now if it is not
        one of them, so the model hears of it)."""
        await self.memory.get([self.subject], record_id)
        self.forgets.append((record_id, reason))

    def set_profile(self, key: str, value_json: str | None) -> None:
        """Queue a long-term register write (``None``: clear the key)."""
        self.changes.append((key, value_json))
        text = f"{key}: {value_json}" if value_json is not None else f"{key}: (cleared)"
        self.remember(text, tags={"key": LSR_KEY_PREFIX + key, LSR_TAG: key}, kind="profile", importance=0.7)


@dataclass
class Prepared:
    """A slice's memory, prepared before its model call."""

    state: dict[str, str]
    registers: registers.Registers
    subject: str | None
    sections: str
    handle: SubjectMemory | None
    options: SubjectOptions
    user_turns: int
    recall_degraded: tuple[str, ...] = ()
    #: (record id, subject) of the memories the section shows, best first
    recalled: tuple[tuple[str, str], ...] = ()

    def finish(self, plan: CommitPlan, found: tuple[Fact, ...] = ()) -> CommitPlan:
        """``plan`` with its state changes as register changes (same transaction), and
        the long-term register writes and compaction ``found`` facts queued."""
        changes, writes = registers.finish(
            self.registers,
            plan.state,
            subject=self.subject,
            user_turns=self.user_turns,
            tsr_turns=self.options.tsr_turns,
        )
        if self.handle is not None:
            for key, value in writes:
                if key in self.options.long_term:
                    self.handle.set_profile(key, value)
            for fact in found:
                tags: dict[str, str | int | float | bool] = dict(fact.tags)
                if fact.key:
                    tags["key"] = fact.key
                kind = _KINDS.get(fact.kind, "fact")
                self.handle.remember(fact.text, tags=tags, kind=kind, importance=fact.importance)
        after = dict(self.state)
        for change in changes:
            journal.apply(after, change)
        state_json, subject = state_row(after)
        return msgspec.structs.replace(plan, state=changes, state_json=state_json, subject=subject)


class LoopMemory:
    """The memory side of slices for agents with a subject (see the module docstring)."""

    def __init__(self, store: Store, memory: Callable[[], Memory]) -> None:
        self.store = store
        self._memory = memory
        #: an observer of each prepared slice (benchmarks grade what prompts showed)
        self.on_prepared: Callable[[str, Prepared], None] | None = None

    async def state(self, load: SliceLoad) -> dict[str, str]:
        """The thread's journal state: from its row, read with the load; replayed from the
        journal only when the row does not carry it (over its bound, or a thread last
        written before rows carried it: its next commit writes it)."""
        if load.state is not None:
            return dict(load.state)
        return dict((await self.store.journal.recover(load.thread.id)).state)

    async def prepare(
        self, load: SliceLoad, options: SubjectOptions, budgets: tuple[int, int], agent: str
    ) -> Prepared:
        """The slice's registers, recalled memories and sections (``budgets``: tokens of
        the memories and state sections)."""
        state = await self.state(load)
        regs = registers.read(state)
        subject = registers.subject_of(load.inputs, regs.subject)
        user_turns = sum(1 for item in load.inputs if item.kind == "user")
        if subject is None:
            return Prepared(state, regs, None, "", None, options, user_turns)
        memory = await self._memory().for_tenant(tenant_of(load.thread.id))
        handle = SubjectMemory(subject=subject, thread_id=load.thread.id, agent=agent, memory=memory)
        memories_budget, state_budget = budgets
        hits: list[tuple[str, Mapping[str, object]]] = []
        recalled: list[tuple[str, str]] = []
        profile_entries: list[tuple[str, str]] = []
        degraded: tuple[str, ...] = ()
        if options.remember_parts:
            handle.adds.extend(part_memories(load.inputs, subject, load.thread.id, agent))
        if options.recall:
            # the parts' text first: the query is cut to its tail, the user's own words
            query = " ".join(
                " ".join([*(p.text for p in item.parts if p.text), item.content])
                for item in load.inputs
                if item.kind != "tool_result"
            )
            mode = HYBRID if options.recall_vectors else TEXT_ONLY
            # recall and the profile read run as one job in one worker thread: two jobs
            # would each wait for the event loop's hand-off and for the interpreter lock
            found, profile_records = await asyncio.to_thread(
                _recall_and_profile, memory, subject, query[-QUERY_CHARS:], options.recall_k, mode
            )
            profile_entries = profile_of(profile_records)
            degraded = found.degraded
            for hit in found.hits:
                record = hit.record
                if record.kind == "profile" and LSR_TAG in record.tags:
                    continue  # shown in the state section
                hits.append((record.text, record.tags))
                recalled.append((record.id, record.subject))
        turn = regs.turn + user_turns
        live = [(k, v) for k, v in regs.entries if regs.turns.get(k, 0) > turn - options.tsr_turns]
        state_text = sections.state(live, profile_entries, state_budget)
        memories_text, shown = sections.memories(hits, memories_budget)
        prepared = Prepared(
            state,
            regs,
            subject,
            sections.compose(None, state_text, memories_text) or "",
            handle,
            options,
            user_turns,
            degraded,
            tuple(recalled[i] for i in shown),
        )
        if self.on_prepared is not None:
            self.on_prepared(load.thread.id, prepared)
        return prepared

    async def seal(self, prepared: Prepared, plan: CommitPlan) -> tuple[CommitPlan, int]:
        """``plan`` with the slice's queued memory writes (``remember``, ``forget``, the
        long-term register, the compaction's facts) built, validated and embedded, off
        the event loop, so the store writes them in the plan's own transaction: a slice
        that fails leaves no memory behind, one that commits loses none. A queued memory
        the rules refuse (:class:`~dormant.errors.InvalidInput`) is dropped alone and
        logged; the slice goes on. Returns the plan and how many were dropped."""
        handle = prepared.handle
        if handle is None or (not handle.adds and not handle.forgets):
            return plan, 0
        memory = handle.memory
        core, tenant = memory.core, memory.tenant
        adds: list[NewMemory] = []
        dropped = 0
        for new in handle.adds:
            try:
                core.build(tenant, new, 0.0)
            except InvalidInput as exc:
                dropped += 1
                _dropped(plan.thread_id, exc)
                continue
            adds.append(new)
        forgets = [((handle.subject,), record_id, reason) for record_id, reason in handle.forgets]
        writes = await asyncio.to_thread(
            core.prepare_writes, tenant, adds, forgets, actor=f"thread:{plan.thread_id}"
        )
        fanned = await self._fan_out(prepared, plan, handle)
        admissions = plan.admissions + fanned
        return msgspec.structs.replace(plan, memory=writes, admissions=admissions), dropped

    async def _fan_out(
        self, prepared: Prepared, plan: CommitPlan, handle: SubjectMemory
    ) -> tuple[NewInput, ...]:
        """The slice's long-term register changes as ``event`` inputs of the subject's
        other open threads (:mod:`dormant.memory.state_events`), admitted by its own commit."""
        options = prepared.options
        if not handle.changes or not options.fan_out:
            return ()
        targets = await self.store.subject_threads(
            plan.thread_id, handle.subject, limit=state_events.MAX_FANOUT
        )
        if not targets:
            return ()
        commit = plan.messages[0].seq if plan.messages else 0
        return state_events.events(
            handle.changes,
            source=plan.thread_id,
            commit=commit,
            targets=targets,
            priorities=options.priorities,
        )


def part_memories(inputs: Sequence[Input], subject: str, thread_id: str, agent: str) -> list[NewMemory]:
    """The memories of the text of the images and files the user sent in ``inputs``:
    per part with text, its first :data:`PART_CHUNKS` chunks, each an ``event`` tagged
    ``type=attachment``, ``part`` (image/file), ``name`` and ``blob`` (its reference),
    valid from the input's admission; at most :data:`SLICE_PART_MEMORIES` in all."""
    out: list[NewMemory] = []
    for item in inputs:
        if item.kind != "user":
            continue
        for part in item.parts:
            if not part.text or not part.text.strip():
                continue
            name = part.name or part.kind
            head = (
                f"Photo or image {name} the user sent"
                if part.kind == "image"
                else f"File {name} ({part.media_type}) the user sent"
            )
            tags: dict[str, str | int | float | bool] = {
                "type": ATTACHMENT,
                "part": part.kind,
                "blob": part.ref,
            }
            if part.name:
                tags["name"] = part.name[:200]
            chunks = chunk_text(part.text, PART_CHUNK_CHARS)[:PART_CHUNKS]
            for index, chunk in enumerate(chunks):
                if len(out) >= SLICE_PART_MEMORIES:
                    return out
                out.append(
                    NewMemory(
                        subject=subject,
                        text=f"{head}: {chunk}",
                        kind="event",
                        tags={**tags, "chunk": index} if len(chunks) > 1 else tags,
                        agent=agent,
                        thread=thread_id,
                        source_thread=thread_id,
                        valid_from=item.admitted_at if item.admitted_at > 0 else None,
                    )
                )
    return out


def _recall_and_profile(
    memory: Memory, subject: str, query: str, k: int, mode: RecallMode
) -> tuple[Recall, Sequence[MemoryRecord]]:
    """The subject's best ``k`` memories for ``query`` and its newest profile records
    (blocking: run in a worker thread)."""
    from ..memory.ranking import FilterSpec

    found = memory.core.recall(memory.tenant, [subject], query, k=k, mode=mode)
    page = memory.core.list(
        memory.tenant, [subject], spec=FilterSpec(kinds=frozenset({"profile"})), limit=PROFILE_LIMIT
    )
    return found, page.items


async def profile(memory: Memory, subject: str) -> list[tuple[str, str]]:
    """The subject's long-term register: ``(key, JSON value)`` of its valid profile
    records that carry a register key (newest first, at most :data:`PROFILE_LIMIT`)."""
    from ..memory.ranking import FilterSpec

    page = await memory.list([subject], spec=FilterSpec(kinds=frozenset({"profile"})), limit=PROFILE_LIMIT)
    return profile_of(page.items)


def profile_of(records: Sequence[MemoryRecord]) -> list[tuple[str, str]]:
    """The long-term register in ``records`` (newest first): ``(key, JSON value)`` of
    those that carry a register key, the newest of each key, cleared keys left out."""
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for record in records:
        key = record.tags.get(LSR_TAG)
        if isinstance(key, str) and key not in seen:
            seen.add(key)
            value = record.text[len(key) + 2 :] if record.text.startswith(f"{key}: ") else record.text
            if value != "(cleared)":
                out.append((key, value))
    return out


def _dropped(thread_id: str, exc: Exception) -> None:
    error = f"{type(exc).__name__}: {exc}"
    log.warning(
        "memory_write_dropped thread=%s: %s", thread_id, error, extra={"thread_id": thread_id, "error": error}
    )
