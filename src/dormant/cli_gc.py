"""``dormant gc``: run retention over every thread (bounded rounds) and write the
state checkpoints that are due."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from .cli_base import StoreOpt, fail, opened_store, out, run_async, settings_for
from .config import DEFAULT_STORE
from .errors import DormantError
from .journal import CheckpointPolicy
from .retention import FULL_TOOL_CALLS, HEAD_CHARS, RetentionPolicy, gc_round


def gc(
    store: StoreOpt = DEFAULT_STORE,
    keep_tool_calls: Annotated[
        int,
        typer.Option(
            "--keep-tool-calls",
            envvar="DORMANT_RETENTION_TOOL_CALLS",
            min=1,
            help="Newest tool results per thread kept whole.",
        ),
    ] = FULL_TOOL_CALLS,
    head_chars: Annotated[
        int,
        typer.Option(
            "--head-chars",
            envvar="DORMANT_RETENTION_HEAD_CHARS",
            min=0,
            help="Characters an older result keeps.",
        ),
    ] = HEAD_CHARS,
) -> None:
    """Cut old tool results to an excerpt (their messages stay) and write due state checkpoints."""
    policy = RetentionPolicy(full_tool_calls=keep_tool_calls, head_chars=head_chars)

    async def go() -> None:
        threads = shrunk = written = 0
        async with opened_store(settings_for(store)) as st:
            while True:  # passes over every thread, until one cuts nothing
                cursor: str | None = None
                cut = 0
                while True:
                    done = await gc_round(st, policy, CheckpointPolicy(), time.time(), cursor)
                    threads += done.threads
                    cut += done.shrunk
                    written += done.checkpoints
                    cursor = done.cursor
                    if cursor is None:
                        break
                shrunk += cut
                if cut == 0:
                    break
        out.print(
            f"gc: {threads} thread visit(s), {shrunk} tool result(s) cut, {written} checkpoint(s) written"
        )

    try:
        run_async(go())
    except DormantError as exc:
        fail(exc)
