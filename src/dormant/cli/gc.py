"""``dormant gc``: run retention over every thread (bounded rounds) and write the
state checkpoints that are due (see :mod:`dormant.retention.policy`)."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from ..config import DEFAULT_STORE
from ..errors import DormantError
from ..journal.rules import CheckpointPolicy
from ..retention.policy import RetentionPolicy, gc_round
from .base import StoreOpt, fail, opened_store, out, run_async, settings_for


def gc(
    store: StoreOpt = DEFAULT_STORE,
    policy_name: Annotated[
        str | None,
        typer.Option(
            "--policy",
            envvar="DORMANT_RETENTION",
            help="Retention policy: keep (nothing deleted or cut) or long-run (every tier); default keep.",
        ),
    ] = None,
    keep_tool_calls: Annotated[
        int | None,
        typer.Option(
            "--keep-tool-calls",
            envvar="DORMANT_RETENTION_TOOL_CALLS",
            min=1,
            help="Newest tool results per thread kept whole. Default 200.",
            show_default=False,
        ),
    ] = None,
    head_chars: Annotated[
        int | None,
        typer.Option(
            "--head-chars",
            envvar="DORMANT_RETENTION_HEAD_CHARS",
            min=0,
            help="Characters an older result keeps. Default 512.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Apply the retention policy and write due checkpoints.

    By default (policy keep) no message is deleted and no tool result is cut:
    only dedup keys past their horizon (7 days) are forgotten.

    With --policy long-run, every tier: old tool results cut to an excerpt,
    old images and files kept as their facts and text (blobs nothing refers
    to any more deleted),
    old runs of history that a summary covers deleted (the thread's history
    then says so), old state folded, superseded summaries nothing reads
    deleted. Counts: the DORMANT_RETENTION_... variables; horizon:
    DORMANT_DEDUP_HORIZON_S; checkpoints: DORMANT_CHECKPOINT_...
    (docs/retention.md).
    """
    settings = settings_for(
        store,
        retention=policy_name,
        retention_tool_calls=keep_tool_calls,
        retention_head_chars=head_chars,
    )
    policy = RetentionPolicy.from_settings(settings)
    checkpoints = CheckpointPolicy.from_settings(settings)

    async def go() -> None:
        threads = shrunk = deleted = summaries = written = demoted = 0
        async with opened_store(settings) as st:
            while True:  # passes over every thread, until one changes nothing
                sizes = await st.retention_sizes() if policy.budget_bytes else None
                cursor: str | None = None
                changed = 0
                while True:
                    done = await gc_round(st, policy, checkpoints, time.time(), cursor, sizes=sizes)
                    threads += done.threads
                    changed += done.shrunk + done.deleted + done.summaries + done.demoted
                    shrunk += done.shrunk
                    deleted += done.deleted
                    summaries += done.summaries
                    demoted += done.demoted
                    written += done.checkpoints
                    cursor = done.cursor
                    if cursor is None:
                        break
                if changed == 0:
                    break
        out.print(
            f"gc ({policy.name}): {threads} thread visit(s), {shrunk} tool result(s) cut, "
            f"{demoted} message(s) with images or files kept as their facts and text, "
            f"{deleted} row(s) deleted, "
            f"{summaries} superseded summary(ies) deleted, {written} checkpoint(s) written"
        )

    try:
        run_async(go())
    except DormantError as exc:
        fail(exc)
