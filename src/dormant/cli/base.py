"""Plumbing shared by the ``dormant`` command modules (:mod:`dormant.cli.main`, :mod:`dormant.cli.history`).

The consoles, the options more than one module uses, the error exit, opening
the store, and small text helpers. It imports no command module, so command
modules can import it without a cycle (``python -m dormant.cli`` runs ``cli/main.py``
as ``__main__``, and a module importing ``dormant.cli.main`` back would load it twice).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from ..config import Settings
from ..errors import DormantError, Overloaded, UsageError
from ..store import MAX_PAGE, Store, open_store, store_options
from ..urls import redact, remember, scrub

T = TypeVar("T")

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

StoreOpt = Annotated[
    str,
    typer.Option(
        "--store",
        envvar="DORMANT_STORE",
        help="Store URL: sqlite:///path.db, postgresql://user@host/db or memory://.",
    ),
]
LimitOpt = Annotated[
    int,
    typer.Option("--limit", envvar="DORMANT_LIMIT", min=1, max=MAX_PAGE, help="Items per page."),
]
MaxCharsOpt = Annotated[
    int,
    typer.Option("--max-chars", envvar="DORMANT_MAX_CHARS", min=0, help="Cut longer texts (0: never)."),
]


def fail(exc: DormantError) -> NoReturn:
    """Print ``exc`` as one red ``error:`` line on stderr and exit (2: caller's mistake, 1: other)."""
    message = " ".join((str(exc) or type(exc).__name__).split("\n"))  # one line, always
    message = scrub(message)  # no store password, whoever built the message
    if isinstance(exc, Overloaded):
        message += f" (retry after {exc.retry_after:g}s)"
    err.print(Text.assemble(("error: ", "bold red"), (message, "red")))
    raise typer.Exit(2 if isinstance(exc, UsageError) else 1)


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion, turning expected errors into :func:`fail`."""
    try:
        return asyncio.run(coro)
    except DormantError as exc:
        fail(exc)


def settings_for(store: str, **overrides: Any) -> Settings:
    """Validated settings: ``DORMANT_*`` variables, then the command's options."""
    settings = Settings.from_env(store=store, **overrides)
    remember(settings.store)  # so its password is scrubbed from anything printed or logged
    return settings


async def announce_if_new(store: Store) -> None:
    """Say on stderr that ``store`` is about to be created, when it does not exist yet and
    stderr is a terminal.

    Every command that uses a store creates a missing one (as ``dormant init`` does), so
    ``send``, ``serve``, ``status`` or ``threads`` on a new path all work; at a terminal
    this line makes a mistyped path visible, while a script's stderr keeps its one
    ``error:`` line contract. ``doctor`` and ``backup`` only examine or copy a store and
    never create one."""
    if err.is_terminal and store.persistent and not await store.exists():
        err.print(f"note: no store at {redact(store.url)} yet: creating it", style="yellow")


@asynccontextmanager
async def opened_store(settings: Settings, *, announce: bool = True) -> AsyncIterator[Store]:
    """The settings' store, opened (created or migrated); a new one is announced on
    stderr unless ``announce`` is false (``dormant init``, which says so itself)."""
    store = open_store(settings.store, **store_options(settings.store, settings))
    if announce:
        await announce_if_new(store)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


def when(ts: float) -> str:
    """A timestamp as local ``YYYY-MM-DD HH:MM:SS`` ('-' when unset)."""
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts > 0 else "-"


def clip(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters (0: no limit), saying how much was cut."""
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}… [{len(text) - max_chars:,} more characters]"
