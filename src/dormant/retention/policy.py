"""Retention: what the store keeps of long threads; the full description is
``docs/retention.md``.

**By default nothing a user sent or an agent wrote is deleted or cut**
(:data:`KEEP`, the ``keep`` policy): every message and every tool result stays whole,
every summary and every state change record stays. The background pass only writes
the state checkpoints that are due and forgets dedup keys past their horizon (7 days:
a redelivery older than that may be admitted again; no message is touched).

The tiers are a policy an operator (``DORMANT_RETENTION=long-run``, the
``DORMANT_RETENTION_*`` counts) or an agent (``Agent(retention="long-run")``, or a
:class:`RetentionPolicy` of its own) turns on. :data:`LONG_RUN`, for autonomous agents
that run for hours, applies every tier, per thread:

- **tool results**: the newest 200 keep their full text; older ones are cut to an
  excerpt (their first 512 characters, whose first line names their blob, if any)
  plus a note, and the thread stops referring to their blob, which is collected
  once no thread refers to it. The message stays, so every assistant tool call
  keeps exactly one result (correctness rule 5).
- **images and files** (content parts): the newest 50 of a thread stay whole; an
  older message keeps each part's facts (kind, media type, size, width and height,
  name) and text (alt text, a caption, extracted or OCR text) but no longer refers to
  its blob, so views show it as its placeholder and ``show`` / ``export`` as its
  facts; the blob is collected once no message, input or whole tool result of any
  thread refers to it (the same photo sent to another thread keeps it).
- **state** (the state journal, by run): the newest 5 runs keep every change
  record; the 20 runs before keep only the last change of each key per run (their
  key figures: the state at every run's end); older change records are folded into
  the newest recoverable full checkpoint that covers them.
- **history**: whole runs older than those 25, and older than the run of the
  oldest whole tool result, that a compaction summary covers are deleted (the
  summary stands for them; whole tool results are never deleted, only their cut
  excerpts go); never in a thread that has children (their views read the parent's
  history), never splitting a call from its result (a run starts at a user message,
  which a thread takes only when no call is open). The thread's retention mark
  (:class:`~dormant.records.RetentionMark`: how many, up to which seq, under which
  policy) records it, and ``dormant show``, ``GET /v1/threads/{id}/messages`` and
  ``dormant export`` say so.
- **summaries**: a thread's compaction summaries superseded by a newer one go once
  nothing can read them: its ``keep_summaries`` (2) newest stay, and any a child
  inherits or a fork at a still-stored message would (see
  :meth:`~dormant.store.core_retention.RetentionRules.prune_summaries`), so with the
  history pruned the summaries stop growing too.
- **budget**: with ``budget_bytes`` set, no tier may take more than ``tier_share``
  (30 %) of it; while one does, each round applies that tier's rule more strictly
  (fewer whole tool results, fewer runs of history or of state), oldest entries first.

Every policy prunes **dedup keys** ``dedup_horizon_s`` (7 days) after their input was
admitted, unless their input is still pending or an outbox entry still names them.
Consumed inputs are deleted by the slice that consumes them (they live on as messages).

:func:`gc_round` is one bounded pass over a page of threads, each under its agent's
policy (or the runtime's); ``dormant gc`` repeats it and
:class:`~dormant.retention.loop.RetentionLoop` runs it in the background.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from ..config import RETENTION_POLICIES
from ..errors import NotFound, UsageError
from ..journal.rules import CheckpointPolicy
from ..records import Thread, TierSizes
from ..store.base import Store
from ..store.core_retention import RETENTION_NOTE

if TYPE_CHECKING:
    from ..config import Settings

#: Appended to a tool result retention cut.
NOTE = RETENTION_NOTE

#: Default: the newest tool results of a thread kept whole.
FULL_TOOL_CALLS = 200
#: Default: characters an older tool result keeps.
HEAD_CHARS = 512
#: Default: the newest images and files of a thread kept whole.
FULL_PARTS = 50
#: Default: the newest runs of a thread whose state (every change record) is kept.
FULL_RUNS = 5
#: Default: the runs before those whose state keeps its key figures only.
METRIC_RUNS = 20
#: Default: the newest compaction summaries of a thread always kept.
KEEP_SUMMARIES = 2
#: Default: how long a dedup key is kept after its input was admitted (7 days).
DEDUP_HORIZON_S = 7 * 86400.0
#: Default: the largest share of the store's budget one tier may take.
TIER_SHARE = 0.30


#: The names of the policies :meth:`RetentionPolicy.named` knows.
POLICY_NAMES: Final = RETENTION_POLICIES


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """What retention keeps and how much one round may do.

    The default, ``RetentionPolicy()`` (:data:`KEEP`), deletes and cuts nothing: every
    tier switch (``tool_results``, ``history``, ``summaries``, ``journal``, ``parts``) is off, and
    only dedup keys past their horizon are forgotten (``parts`` too is off: images and
    files stay whole). :data:`LONG_RUN` turns every tier
    on with the counts below; ``dataclasses.replace`` a policy to tune one. ``name`` is
    what a thread's retention mark records."""

    #: what a thread's retention mark names (``dormant show`` prints it)
    name: str = "keep"
    #: cut tool results older than the newest ``full_tool_calls`` to ``head_chars``
    tool_results: bool = False
    #: delete whole old runs of history that a summary covers (needs ``tool_results``
    #: to reach past the whole tool results)
    history: bool = False
    #: delete superseded summaries nothing reads any more
    summaries: bool = False
    #: fold old state change records into checkpoints (exact time travel only in the
    #: newest ``full_runs``)
    journal: bool = False
    #: keep images and files older than the newest ``full_parts`` as their facts and
    #: text only (their blobs collected once nothing refers to them)
    parts: bool = False
    #: the newest tool results of a thread kept whole
    full_tool_calls: int = FULL_TOOL_CALLS
    #: characters an older tool result keeps (an excerpt's header names its blob)
    head_chars: int = HEAD_CHARS
    #: the newest images and files of a thread kept whole (at least: a message's parts
    #: go together)
    full_parts: int = FULL_PARTS
    #: the newest runs of a thread keeping every state change record
    full_runs: int = FULL_RUNS
    #: the runs before those keeping the last change of each key per run
    metric_runs: int = METRIC_RUNS
    #: the newest compaction summaries of a thread always kept (older ones go once
    #: superseded and needed by no child or fork)
    keep_summaries: int = KEEP_SUMMARIES
    #: seconds a dedup key is kept after its admission
    dedup_horizon_s: float = DEDUP_HORIZON_S
    #: the store's byte budget (0: none); no tier may take more than ``tier_share`` of it
    budget_bytes: int = 0
    tier_share: float = TIER_SHARE
    #: most rows (tool results cut, messages, journal rows, dedup keys) one step of a
    #: round changes per thread (bounded work)
    per_round: int = 500
    #: threads visited per round
    threads_per_round: int = 100

    def __post_init__(self) -> None:
        if not self.name or len(self.name) > 64:
            raise ValueError("a retention policy is named by 1 to 64 characters")
        counts = (self.full_tool_calls, self.full_runs, self.keep_summaries, self.full_parts)
        if min(*counts, self.per_round, self.threads_per_round) < 1:
            raise ValueError("retention counts must be >= 1")
        if self.head_chars < 0 or self.metric_runs < 0 or self.budget_bytes < 0:
            raise ValueError("head_chars, metric_runs and budget_bytes must be >= 0")
        if self.dedup_horizon_s <= 0 or not 0 < self.tier_share <= 1:
            raise ValueError("the dedup horizon must be > 0 and the tier share in (0, 1]")

    @property
    def prunes(self) -> bool:
        """Whether this policy deletes or cuts anything but dedup keys."""
        return self.tool_results or self.history or self.summaries or self.journal or self.parts

    @classmethod
    def named(cls, name: str) -> RetentionPolicy:
        """:data:`KEEP` for ``"keep"``, :data:`LONG_RUN` for ``"long-run"``; UsageError
        for any other name."""
        if name == "keep":
            return KEEP
        if name == "long-run":
            return LONG_RUN
        raise UsageError(f"unknown retention policy {name!r}: use one of {', '.join(POLICY_NAMES)}")

    @classmethod
    def long_run(cls, **counts: int | float) -> RetentionPolicy:
        """:data:`LONG_RUN` (every tier on) with some of its counts replaced."""
        return dataclasses.replace(LONG_RUN, **counts)  # type: ignore[arg-type]

    @classmethod
    def of(cls, spec: RetentionPolicy | str) -> RetentionPolicy:
        """A policy as given, or the one a name names (:meth:`named`)."""
        if isinstance(spec, RetentionPolicy):
            return spec
        if isinstance(spec, str):
            return cls.named(spec)
        raise UsageError(f"retention= takes a RetentionPolicy or a policy name, not {type(spec).__name__}")

    @classmethod
    def from_settings(cls, settings: Settings, name: str | None = None) -> RetentionPolicy:
        """The policy the settings describe: ``retention`` names it (``keep``, the default,
        or ``long-run``; ``name`` instead when given), and the ``retention_*`` counts and
        ``dedup_horizon_s`` tune it."""
        base = cls.named(settings.retention if name is None else name)
        return dataclasses.replace(
            base,
            full_tool_calls=settings.retention_tool_calls,
            head_chars=settings.retention_head_chars,
            full_parts=settings.retention_parts,
            full_runs=settings.retention_full_runs,
            metric_runs=settings.retention_metric_runs,
            keep_summaries=settings.retention_summaries,
            dedup_horizon_s=settings.dedup_horizon_s,
            budget_bytes=settings.retention_budget_bytes,
            tier_share=settings.retention_tier_share,
        )


#: The default policy: nothing a user sent or an agent wrote is deleted or cut.
KEEP: Final = RetentionPolicy()
#: Every tier on (docs/retention.md), for autonomous agents that run for hours.
LONG_RUN: Final = RetentionPolicy(
    name="long-run", tool_results=True, history=True, summaries=True, journal=True, parts=True
)


@dataclass(frozen=True, slots=True)
class Strictness:
    """How strictly one round applies the policy: the policy itself when no tier is
    over its share of the budget, tighter counts for the tiers that are."""

    keep_tool_calls: int
    keep_parts: int
    history_runs: int
    full_runs: int
    metric_runs: int


def strictness(policy: RetentionPolicy, sizes: TierSizes | None) -> Strictness:
    """Scale down the count of each tier over ``tier_share * budget_bytes`` by how far
    over it is (at least 1 kept), so its oldest entries go first."""
    plain = Strictness(
        keep_tool_calls=policy.full_tool_calls,
        keep_parts=policy.full_parts,
        history_runs=policy.full_runs + policy.metric_runs,
        full_runs=policy.full_runs,
        metric_runs=policy.metric_runs,
    )
    if not policy.budget_bytes or sizes is None:
        return plain
    cap = policy.tier_share * policy.budget_bytes

    def scaled(count: int, size: int) -> int:
        return count if size <= cap else max(1, int(count * cap / size))

    tools = max(sizes.tool_full, sizes.blobs)
    history = max(sizes.history, sizes.tool_excerpt)
    journal_runs = scaled(plain.full_runs + plain.metric_runs, sizes.journal)
    return Strictness(
        keep_tool_calls=scaled(plain.keep_tool_calls, tools),
        keep_parts=scaled(plain.keep_parts, sizes.blobs),
        history_runs=scaled(plain.history_runs, history),
        full_runs=min(plain.full_runs, journal_runs),
        metric_runs=max(0, journal_runs - min(plain.full_runs, journal_runs)),
    )


def over_budget(policy: RetentionPolicy, sizes: TierSizes) -> list[str]:
    """The tiers taking more than ``tier_share`` of the budget (none without a budget)."""
    if not policy.budget_bytes:
        return []
    cap = policy.tier_share * policy.budget_bytes
    return [name for name, size in sizes.items() if size > cap]


@dataclass(frozen=True, slots=True)
class GcRound:
    """What one :func:`gc_round` did; ``cursor`` is where the next round starts (None: the end)."""

    cursor: str | None
    threads: int
    #: tool results cut to an excerpt
    shrunk: int
    checkpoints: int
    #: rows deleted: history messages, journal rows (and checkpoint pieces), dedup keys
    deleted: int = 0
    #: superseded compaction summaries deleted
    summaries: int = 0
    #: messages whose images and files were kept as their facts and text only
    demoted: int = 0


async def gc_round(
    store: Store,
    policy: RetentionPolicy,
    checkpoints: CheckpointPolicy | None,
    now: float,
    cursor: str | None = None,
    *,
    sizes: TierSizes | None = None,
    force_checkpoints: bool = False,
    policy_for: Callable[[Thread], RetentionPolicy] | None = None,
) -> GcRound:
    """One bounded round: for a page of threads from ``cursor``, apply every tier (see the
    module docstring) and write the state checkpoint that is due (if a checkpoint policy
    is given; with ``force_checkpoints``, one for every thread whose state changed since
    its last). The first round of a pass (``cursor`` None) also prunes dedup keys past
    the horizon, at most ``per_round`` of them. ``policy_for`` gives a thread's own
    policy (its agent's ``retention``); ``policy`` is the rest's, and sets the dedup
    horizon and the page size. ``sizes``: the tier sizes the budget is checked against
    (read from the store when a budget is set and none are given)."""
    if policy.budget_bytes and sizes is None:
        sizes = await store.retention_sizes()
    deleted = 0
    if cursor is None:
        deleted += await store.prune_dedup_keys(before=now - policy.dedup_horizon_s, limit=policy.per_round)
    page = await store.list_threads(cursor=cursor, limit=policy.threads_per_round)
    shrunk = written = summaries = demoted = 0
    forced = (
        dataclasses.replace(checkpoints, incremental_runs=1, incremental_s=1e-9)
        if checkpoints is not None and force_checkpoints
        else checkpoints
    )
    for thread in page.items:
        mine = policy if policy_for is None else policy_for(thread)
        if mine.budget_bytes and sizes is None:
            sizes = await store.retention_sizes()
        strict = strictness(mine, sizes)
        try:
            if mine.tool_results:
                shrunk += await store.shrink_tool_results(
                    thread.id, keep=strict.keep_tool_calls, head_chars=mine.head_chars, limit=mine.per_round
                )
            if mine.parts:
                demoted += await store.demote_parts(thread.id, keep=strict.keep_parts, limit=mine.per_round)
            if mine.history:
                deleted += await store.prune_history(
                    thread.id,
                    keep_runs=strict.history_runs,
                    keep_tool_calls=strict.keep_tool_calls,
                    limit=mine.per_round,
                    policy=mine.name,
                )
            if mine.summaries:
                summaries += await store.prune_summaries(
                    thread.id, keep=mine.keep_summaries, limit=mine.per_round
                )
            if forced is not None and await store.journal.maybe_checkpoint(thread.id, forced, now):
                written += 1
            if mine.journal:
                deleted += await store.journal.apply_tiers(
                    thread.id,
                    full_runs=strict.full_runs,
                    metric_runs=strict.metric_runs,
                    limit=mine.per_round,
                )
        except NotFound:
            continue  # deleted since the page was read
    return GcRound(
        cursor=page.next_cursor,
        threads=len(page.items),
        shrunk=shrunk,
        checkpoints=written,
        deleted=deleted,
        summaries=summaries,
        demoted=demoted,
    )
