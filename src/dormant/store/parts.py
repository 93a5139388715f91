"""The narrow parts of a backend: journal, retention, blob and tenant rows.

A :class:`~dormant.store.backend.Backend` is composed of these: ``backend.journal``,
``backend.retention``, ``backend.blobs`` and ``backend.tenants`` are objects of the
backend's own (each on the backend's connections, writer and clock), and the core
calls them there; no backend forwards their methods by hand. Long-term memory's rows
are a part too (:meth:`Backend.memory_rows <dormant.store.backend.Backend.memory_rows>`,
:class:`~dormant.memory.backend.MemoryBackend`). The rules of errors and times are
those of :mod:`dormant.store.backend`.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable, Mapping, Sequence
from typing import Protocol

from ..records import ApiKey, Approval, BlobRef, JournalEntry, RetentionMark, Tenant, Thread, TierSizes


class JournalRows(Protocol):
    """The state journal's rows (its change records come with ``apply_plan``)."""

    async def journal_rows(self, thread_id: str, after: int, limit: int) -> list[JournalEntry] | None:
        """Up to ``limit`` journal entries of a thread with seq > ``after``, by seq;
        None if the thread is missing."""
        ...

    async def newest_checkpoint(self, thread_id: str, kind: str) -> JournalEntry | None:
        """The thread's newest *recoverable* checkpoint header of ``kind``
        (``full`` or ``incremental``), None if none."""
        ...

    async def checkpoints_after(self, thread_id: str, after: int, limit: int) -> list[JournalEntry]:
        """Up to ``limit`` recoverable checkpoint headers of a thread with seq > ``after``, by seq."""
        ...

    async def thread_runs(self, thread_id: str) -> int | None:
        """How many runs the thread ended (the sum of its plans' ``runs``); None if missing."""
        ...

    async def subject_threads(self, subject: str, tenant: str, exclude: str, limit: int) -> list[str]:
        """Ids of ``tenant``'s active threads whose row's subject is ``subject``, but
        ``exclude``, most recently updated first, at most ``limit``."""
        ...

    async def begin_checkpoint(
        self, thread_id: str, kind: str, upto: int, parts: int, size: int, digest: str, msg_seq: int = 0
    ) -> JournalEntry:
        """Append a checkpoint header (seq after the journal's newest, ``run`` the
        thread's runs, ``msg_seq`` the message seq its state goes with, not recoverable),
        one transaction; the stored entry. NotFound if the thread is missing."""
        ...

    async def put_checkpoint_parts(self, thread_id: str, seq: int, first: int, parts: Sequence[str]) -> None:
        """Store ``parts`` as body pieces ``first, first + 1, ...`` of checkpoint
        ``seq``, one transaction."""
        ...

    async def checkpoint_parts(self, thread_id: str, seq: int, first: int, limit: int) -> list[str]:
        """Up to ``limit`` body pieces of checkpoint ``seq`` from index ``first``, in order."""
        ...

    async def mark_recoverable(self, thread_id: str, seq: int) -> bool:
        """Set ``recoverable`` on checkpoint ``seq`` if all of its parts are stored
        (one transaction); whether it was marked."""
        ...


class RetentionRows(Protocol):
    """What the retention tiers delete, cut or fold, and the sizes they report."""

    async def shrink_tool_results(
        self, thread_id: str, keep: int, head_chars: int, note: str, limit: int
    ) -> int:
        """Cut the content of at most ``limit`` tool-result messages of a thread, oldest
        first, among those before its ``keep`` (>= 1) newest tool results, to their first
        ``head_chars`` characters followed by ``note`` (token count cleared: views
        estimate it); messages already that short are left. The messages stay (every
        call keeps its one result). The thread's refs to blobs that a cut result showed
        and no whole one (nor a part of a message or input of the thread) still shows
        are dropped, and the blobs no thread refers to any more deleted. One
        transaction; how many were cut."""
        ...

    async def demote_parts(self, thread_id: str, keep: int, note: str, limit: int) -> int:
        """Drop the blob reference of every part (image or file) of at most ``limit``
        messages of a thread, oldest first, among those older than the message holding
        its ``keep``-th (>= 1) newest part, that still have a part with one; the parts
        keep their facts and text, the message's token count is cleared (views count it
        again). Then the thread's refs to those blobs that no message or input of the
        thread still refers to (by a part, or a whole tool result showing it: ``note``
        is what a cut one ends with) are dropped, and the blobs no thread refers to any
        more deleted. One transaction; how many messages changed."""
        ...

    async def prune_history(
        self, thread_id: str, keep_runs: int, keep_tool_calls: int, note: str, limit: int, policy: str
    ) -> int:
        """Delete the thread's oldest messages: those before its ``keep_runs``-th newest
        user message (a run's start: no call is open there), before the run of its
        oldest whole tool result (the ``keep_tool_calls``-th newest tool result, or the
        oldest if it has fewer) and covered by its summary (seq <= ``summary_seq``);
        nothing in a thread that has children. Whole runs at a
        time, as many as fit in ``limit`` messages (at least one), so no call is parted
        from its result. Blob refs of the deleted messages (shown by their tool results
        or held by their parts) are released as by :meth:`shrink_tool_results`
        (``note``: what a cut result ends with). In the same transaction the thread's
        retention mark adds them (up to the seq before the first one kept, under
        ``policy``). One transaction; how many were deleted."""
        ...

    async def retention_mark(self, thread_id: str) -> RetentionMark | None:
        """The thread's retention mark (None: retention deleted none of its messages)."""
        ...

    async def prune_dedup_keys(self, before: float, limit: int) -> int:
        """Delete up to ``limit`` dedup keys admitted before ``before``, oldest first,
        except those whose input is still pending or that an outbox entry names. One
        transaction; how many."""
        ...

    async def prune_summaries(self, thread_id: str, keep: int, limit: int) -> int:
        """Delete up to ``limit`` of the thread's summaries, oldest first, that nothing
        can read any more: not among its ``keep`` (>= 1) newest nor the one its views
        start from (``summary_seq``); superseded by a summary made at or before its
        oldest stored message (a fork at any stored seq inherits that one or a newer);
        and inherited by no child (one spawned at a ``parent_seq`` at or after the
        summary's ``made_at_seq`` and before its successor's). One transaction; how many."""
        ...

    async def drop_superseded(self, thread_id: str, upto_run: int, limit: int) -> int:
        """Delete up to ``limit`` change records of runs <= ``upto_run`` that a later
        change of the same key in the same run supersedes (one transaction); how many."""
        ...

    async def last_change_of_run(self, thread_id: str, upto_run: int) -> int | None:
        """The seq of the newest change record of runs <= ``upto_run`` (None: none)."""
        ...

    async def full_checkpoint_upto(self, thread_id: str, upto: int) -> JournalEntry | None:
        """The newest recoverable full checkpoint whose ``upto`` is <= ``upto``."""
        ...

    async def fold_journal(self, thread_id: str, upto: int, before: int, limit: int) -> int:
        """Delete up to ``limit`` change records with seq <= ``upto`` and checkpoint
        headers with seq < ``before``, and the body pieces of headers that are gone (one
        transaction); rows deleted."""
        ...

    async def journal_seq_at(self, thread_id: str, msg_seq: int) -> int:
        """The seq of the newest change record written when the thread's last message seq
        was <= ``msg_seq`` (0: none)."""
        ...

    async def fork_thread(self, source: str, new_id: str, at_seq: int, state: Mapping[str, str]) -> Thread:
        """Insert thread ``new_id`` of ``source``'s agent, child of ``source`` at
        ``at_seq`` (its views read ``source``'s history up to there), with one ``add``
        change record per ``state`` key (seqs 1.., run 0); one transaction; the stored
        row. NotFound if ``source`` is missing, UsageError if ``new_id`` exists."""
        ...

    async def tier_sizes(self, note: str) -> TierSizes:
        """Bytes each retention tier takes (``note``: what a cut tool result ends with)."""
        ...

    async def journal_totals(self) -> tuple[float | None, int, int, int, int]:
        """The newest recoverable checkpoint's creation time (None: none) and bytes; the
        bytes of each thread's newest recoverable full checkpoint, of the recoverable
        increments after them, and the count of change records after each thread's
        newest recoverable checkpoint."""
        ...

    async def oldest_ready_at(self, now: float) -> float | None:
        """The admission time of the oldest pending input that its (active) thread may
        consume at ``now`` (None: none)."""
        ...


class BlobRows(Protocol):
    """Large tool outputs, stored once by content, read by range."""

    async def put_blob(self, thread_id: str, chunks: AsyncIterable[bytes] | Iterable[bytes]) -> BlobRef:
        """As :meth:`dormant.store.base.Store.put_blob` (bounded write batches)."""
        ...

    async def part_bytes_since(self, thread_id: str, since: float) -> int:
        """Bytes of the image and file parts ``thread_id`` took since ``since`` (its
        pending inputs admitted since and its messages written since; 0: none)."""
        ...

    async def blob_size(self, thread_id: str, ref: str) -> int | None:
        """Size of ``ref`` if the thread or an ancestor refers to it (complete blobs
        only); None if not visible. NotFound if the thread is missing."""
        ...

    async def read_blob(self, thread_id: str, ref: str, offset: int, length: int) -> bytes | None:
        """Bytes ``offset .. offset + length`` (already validated) of a visible blob,
        reading only the chunks that hold them; None if not visible. NotFound if the
        thread is missing."""
        ...

    async def sweep_blobs(self) -> int:
        """Remove what blob writes that never finished left more than
        :data:`dormant.tools.blobs.TMP_TTL_S` ago; how many chunks went."""
        ...


class TenantRows(Protocol):
    """Tenants and API keys (rare, small writes)."""

    async def insert_tenant(self, tenant: Tenant) -> bool:
        """Insert the tenant; False (nothing written) when its name or id is taken."""
        ...

    async def find_tenant(self, name_or_id: str) -> Tenant | None:
        """The tenant with that id, else with that name; None if neither."""
        ...

    async def tenant_rows(self, after: str, limit: int) -> list[Tenant]:
        """Tenants whose name sorts after ``after``, by name."""
        ...

    async def insert_key(self, key: ApiKey, salt: bytes, digest: bytes) -> None:
        """Insert a key of an existing tenant (the core checked it exists)."""
        ...

    async def revoke_key(self, key_id: str, now: float) -> ApiKey | None:
        """Set the key's ``revoked_at`` to ``now`` unless already revoked; its row, None if missing."""
        ...

    async def key_rows(self, tenant_id: str, after: str, limit: int) -> list[ApiKey]:
        """The tenant's keys whose id sorts after ``after``, by id."""
        ...

    async def live_key(self, key_id: str) -> tuple[bytes, bytes, Tenant] | None:
        """A key that is not revoked: its salt, its digest and its tenant; None otherwise."""
        ...


class ApprovalRows(Protocol):
    """Waits for a person (:class:`~dormant.records.Approval`); their requests come with
    ``apply_plan``. The rules (who, what text, idempotency) are the core's."""

    async def approval_rows(
        self,
        *,
        tenant: str | None,
        thread_id: str | None,
        tool: str | None,
        status: str | None,
        open_only: bool,
        requested_before: float,
        after: int,
        limit: int,
    ) -> list[Approval]:
        """Up to ``limit`` waits with id > ``after`` by id (oldest first), of ``tenant``
        (None: every tenant), ``thread_id``, ``tool`` and ``status`` when given, open
        ones only when ``open_only``, requested at or before ``requested_before``."""
        ...

    async def get_approval(self, thread_id: str, call_id: str) -> Approval | None:
        """The wait of call ``call_id`` of a thread, None if none."""
        ...

    async def due_approvals(self, now: float, limit: int) -> list[Approval]:
        """Up to ``limit`` open waits whose deadline (> 0) is at or before ``now``, earliest first."""
        ...

    async def open_approvals(self, tenant: str | None) -> tuple[int, float | None]:
        """How many waits are open (of ``tenant``, or all) and when the oldest was requested."""
        ...

    async def decide_approval(
        self,
        thread_id: str,
        call_id: str,
        *,
        status: str,
        key: str | None,
        by: str | None,
        note: str | None,
        arguments: str | None,
        role: str | None,
        deadline: float,
        result: str,
    ) -> tuple[bool, Approval] | None:
        """Act on an open wait in one transaction: ``approved``/``edited`` put the call in
        the outbox with ``arguments``; ``denied``/``expired``/``answered`` admit ``result``
        as its tool result (dedup key the call id); ``escalated`` (a ``requested`` wait
        only) hands it to ``role`` until ``deadline``. Whether this call acted, and the row
        as it stands; None when there is no such wait."""
        ...
