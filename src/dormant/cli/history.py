"""``dormant show`` and ``dormant export``: a thread's history, one page at a time or all of it.

Both read through :meth:`Store.history <dormant.store.base.Store.history>` (pages of at
most ``MAX_PAGE`` messages; the cursor is the last seq seen), so what they hold in
memory is one page, whatever the size of the thread. :mod:`dormant.cli.main` registers
the two commands on its app.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, BinaryIO

import msgspec
import typer
from rich.text import Text

from ..config import DEFAULT_STORE
from ..errors import DormantError, UsageError
from ..ops.partfiles import PartFiles
from ..records import Message, RetentionMark, Thread
from ..store import Store
from ..urls import redact
from .base import (
    LimitOpt,
    MaxCharsOpt,
    StoreOpt,
    clip,
    err,
    fail,
    opened_store,
    out,
    run_async,
    settings_for,
    when,
)

#: Messages per read of ``dormant export``: a page is written before the next is read.
EXPORT_PAGE = 500
#: The page size of ``dormant show`` when ``--limit`` is not given.
DEFAULT_LIMIT = 50
#: Where ``dormant show`` cuts a long text when neither ``--max-chars`` nor ``--full`` is given.
DEFAULT_MAX_CHARS = 4000


# -- reading a page --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryWindow:
    """One page of a thread's history, oldest first, and where its neighbours start.

    ``older_before`` is the ``--before`` of the page just before this one and
    ``newer_after`` the ``--after`` of the page just after it; each is None when
    there is no such page (no older, or no newer, message).
    """

    thread: Thread
    items: tuple[Message, ...]
    older_before: int | None
    newer_after: int | None
    #: what a retention policy deleted of the thread's history (None: nothing)
    pruned: RetentionMark | None = None


async def read_window(
    store: Store, thread_id: str, *, limit: int, before: int | None = None, after: int | None = None
) -> HistoryWindow:
    """The page of at most ``limit`` messages just before seq ``before``, just after seq
    ``after``, or (neither given) the newest page.

    Raises :class:`~dormant.errors.NotFound` for an unknown thread and
    :class:`~dormant.errors.UsageError` when both ``before`` and ``after`` are given.
    """
    if before is not None and after is not None:
        raise UsageError("--before and --after exclude each other: give one of them")
    thread = await store.get_thread(thread_id)
    older: int | None
    newer: int | None
    if after is not None:
        page = await store.history(thread_id, cursor=str(after), limit=limit)
        items = page.items
        newer = items[-1].seq if page.next_cursor is not None and items else None
        first = items[0].seq if items else after + 1
        older = first if await _any_before(store, thread_id, first) else None
    else:
        cursor = None if before is None else str(before)
        page = await store.history(thread_id, cursor=cursor, limit=limit, newest_first=True)
        items = page.items[::-1]
        older = items[0].seq if page.next_cursor is not None and items else None
        newer = None  # the newest page has no newer one
        if before is not None:
            last = items[-1].seq if items else before - 1
            newer = last if await _any_after(store, thread_id, last) else None
    pruned = await store.retention_mark(thread_id)
    return HistoryWindow(thread=thread, items=items, older_before=older, newer_after=newer, pruned=pruned)


async def _any_before(store: Store, thread_id: str, seq: int) -> bool:
    """Whether the thread has a message older than ``seq``."""
    return bool((await store.history(thread_id, cursor=str(seq), limit=1, newest_first=True)).items)


async def _any_after(store: Store, thread_id: str, seq: int) -> bool:
    """Whether the thread has a message newer than ``seq``."""
    return bool((await store.history(thread_id, cursor=str(seq), limit=1)).items)


# -- dormant show ----------------------------------------------------------------------------


def show(
    thread: Annotated[str, typer.Argument(help="Thread id.")],
    store: StoreOpt = DEFAULT_STORE,
    limit: LimitOpt = DEFAULT_LIMIT,
    before: Annotated[
        int | None,
        typer.Option(
            "--before",
            envvar="DORMANT_BEFORE",
            min=1,
            help="Show the page of messages just before this seq (older messages).",
        ),
    ] = None,
    after: Annotated[
        int | None,
        typer.Option(
            "--after",
            envvar="DORMANT_AFTER",
            min=0,
            help="Show the page of messages just after this seq (newer messages; 0: the first page).",
        ),
    ] = None,
    max_chars: MaxCharsOpt = DEFAULT_MAX_CHARS,
    full: Annotated[
        bool,
        typer.Option("--full", envvar="DORMANT_FULL", help="Print whole texts (no --max-chars cut)."),
    ] = False,
) -> None:
    """Print one page of a thread's history, oldest first, tool calls and results included.

    Without --before/--after: the newest page. The footer prints the commands that
    show the older and the newer page, when there is one.
    """
    if before is not None and after is not None:
        fail(UsageError("--before and --after exclude each other: give one of them"))

    async def go() -> HistoryWindow:
        async with opened_store(settings_for(store)) as st:
            return await read_window(st, thread, limit=limit, before=before, after=after)

    window = run_async(go())
    out.print(thread_line(window.thread, window.pruned))
    if window.pruned is not None:
        out.print(pruned_line(window.pruned), markup=False)
    for message in window.items:
        out.print(message_text(message, max_chars=0 if full else max_chars), end="")
    if not window.items:
        out.print("(no messages)" if before is None and after is None else "(no messages in this range)")
    options: list[str] = []
    if store != DEFAULT_STORE:  # the hints run as printed (a password shows redacted)
        options += ["--store", redact(store)]
    if limit != DEFAULT_LIMIT:
        options += ["--limit", str(limit)]
    if full:
        options.append("--full")
    elif max_chars != DEFAULT_MAX_CHARS:
        options += ["--max-chars", str(max_chars)]
    if window.older_before is not None:
        command = shlex.join(["dormant", "show", thread, "--before", str(window.older_before), *options])
        out.print(f"older: {command}", markup=False)
    if window.newer_after is not None:
        command = shlex.join(["dormant", "show", thread, "--after", str(window.newer_after), *options])
        out.print(f"newer: {command}", markup=False)


def thread_line(row: Thread, pruned: RetentionMark | None = None) -> Text:
    """A one-line summary of a thread row; its message count leaves out the messages a
    retention policy deleted (``pruned``)."""
    text = Text()
    text.append(f"thread {row.id}", style="bold")
    text.append(f"  agent {row.agent}  ")
    text.append(row.status, style="red" if row.status == "failed" else "green")
    stored = row.last_seq - (pruned.pruned if pruned is not None else 0)
    text.append(f"  {max(0, stored)} messages")
    if pruned is not None:
        text.append(f" ({pruned.pruned} pruned)", style="yellow")
    text.append(f"  {row.awaiting} awaiting")
    if row.parent_id:
        text.append(f"  parent {row.parent_id}@{row.parent_seq}")
    usage = row.usage
    if usage.total:
        text.append(f"  tokens {usage.prompt:,} in ({usage.cached:,} cached) / {usage.completion:,} out")
    if row.wait_reason:
        text.append(f"  waiting until {when(row.wait_until)}: {row.wait_reason}", style="yellow")
    if row.error:
        text.append(f"  last error: {row.error}", style="red")
    return text


def pruned_line(mark: RetentionMark) -> str:
    """What a retention policy deleted of a thread's history, in words."""
    return (
        f"pruned: {mark.pruned} message(s), every one up to #{mark.up_to_seq}, deleted by retention "
        f"policy {mark.policy} (last {when(mark.pruned_at)}); the thread's summary stands for them"
    )


def message_text(message: Message, *, max_chars: int, show_time: bool = True) -> Text:
    """One message as readable lines: a header, its text, its tool calls or the call it answers."""
    styles = {"user": "bold cyan", "assistant": "bold green", "tool": "bold magenta"}
    text = Text()
    header = f"#{message.seq} {message.role}"
    if message.role == "tool":
        header += f" ← {message.name or 'tool'} [{message.tool_call_id or '?'}]"
    text.append(header, style=styles[message.role])
    if show_time:
        text.append(f"  {when(message.created_at)}", style="dim")
    if message.source and message.source != message.role:
        text.append(f"  from {message.source}", style="dim")
    if message.cut:
        text.append("  [cut by the output cap]", style="bold red")
    elif message.finish_reason not in (None, "stop", "tool_calls"):
        text.append(f"  [finish_reason {message.finish_reason}]", style="red")
    if message.usage is not None:
        u = message.usage
        text.append(f"  tokens {u.prompt:,} in ({u.cached:,} cached) / {u.completion:,} out", style="dim")
    text.append("\n")
    if message.reasoning:
        body = clip(message.reasoning, max_chars)
        text.append("".join(f"  ~ {line}\n" for line in body.split("\n")), style="dim italic")
    if message.content:
        body = clip(message.content, max_chars)
        text.append("".join(f"  {line}\n" for line in body.split("\n")))
    for part in message.parts:  # facts and the blob reference, never the bytes
        size = f", {part.width}x{part.height}" if part.kind == "image" else ""
        text.append(
            f"  [{part.kind}: {part.name or 'unnamed'}, {part.media_type}, {part.size:,} bytes{size}]"
        )
        text.append(f"  {part.ref}\n", style="dim")
    for call in message.tool_calls:
        text.append(f"  → {call.name}({clip(call.arguments, max_chars)})", style="yellow")
        text.append(f"  [{call.id}]\n", style="dim")
    return text


# -- dormant export --------------------------------------------------------------------------


@dataclass(slots=True)
class ExportProgress:
    """How far an export got: lines written, their bytes, and the seq of the last one."""

    messages: int = 0
    bytes: int = 0
    last_seq: int = 0
    #: images and files the exported messages hold
    parts: int = 0


def export_record(thread_id: str, message: Message, files: Sequence[str] = ()) -> dict[str, Any]:
    """The object one JSONL line encodes: ``thread_id``, then every field of the message
    (a field added to :class:`~dormant.records.Message` appears without a change here);
    with ``files`` (one per part), each part names the file its bytes were written to."""
    record = {"thread_id": thread_id, **msgspec.structs.asdict(message)}
    if files:
        record["parts"] = [
            {**msgspec.structs.asdict(p), "file": f} for p, f in zip(message.parts, files, strict=True)
        ]
    return record


async def export_history(
    store: Store,
    thread_id: str,
    write: Callable[[bytearray], object],
    *,
    after: int = 0,
    page_size: int = EXPORT_PAGE,
    progress: ExportProgress | None = None,
    parts: PartFiles | None = None,
) -> ExportProgress:
    """Write the thread's messages after seq ``after`` to ``write`` as JSONL, oldest first.
    With ``parts``, each message's images and files are written there first (each blob
    once, streamed) and its line names their files; without, a line keeps their
    references and facts only.

    Each page of ``page_size`` messages is written before the next is read, so memory
    is bounded by one page (and the longest line) whatever the size of the thread.
    ``write`` gets one whole line per call, in a buffer it must not keep (it is reused).
    ``progress`` (returned, and updated as lines are written) tells a caller how far
    an export got when it raised. Raises :class:`~dormant.errors.NotFound` for an
    unknown thread.
    """
    done = progress if progress is not None else ExportProgress(last_seq=after)
    encoder = msgspec.json.Encoder()
    line = bytearray()
    cursor: str | None = str(after)
    while cursor is not None:
        page = await store.history(thread_id, cursor=cursor, limit=page_size)
        for message in page.items:
            files = [await parts.write(thread_id, p) for p in message.parts] if parts is not None else []
            done.parts += len(message.parts)
            encoder.encode_into(export_record(thread_id, message, files), line)
            line.extend(b"\n")
            write(line)
            done.messages += 1
            done.bytes += len(line)
            done.last_seq = message.seq
        cursor = page.next_cursor
    return done


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[BinaryIO]:
    """A file that appears at ``path`` complete or not at all: written to a temporary
    file beside it, flushed to disk, then renamed over ``path``; removed on error."""
    if path.is_dir():
        raise UsageError(f"cannot write {str(path)!r}: it is a directory")
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise UsageError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "wb") as file:
            umask = os.umask(0o022)  # read it: mkstemp makes 0600, a new file gets 0666 & ~umask
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def export(
    thread: Annotated[str, typer.Argument(help="Thread id.")],
    store: StoreOpt = DEFAULT_STORE,
    out_path: Annotated[
        Path | None,
        typer.Option(
            "--out",
            envvar="DORMANT_EXPORT_OUT",
            help="Write to this file: it appears complete or not at all (default, or '-': stdout).",
        ),
    ] = None,
    after: Annotated[
        int,
        typer.Option(
            "--after",
            envvar="DORMANT_EXPORT_AFTER",
            min=0,
            help="Only messages after this seq (resume an export).",
        ),
    ] = 0,
    quiet: Annotated[
        bool,
        typer.Option("--quiet", envvar="DORMANT_QUIET", help="No summary line on stderr."),
    ] = False,
    parts_dir: Annotated[
        Path | None,
        typer.Option(
            "--parts-dir",
            envvar="DORMANT_EXPORT_PARTS_DIR",
            help="Write the bytes of images and files here, one file per blob named by its SHA-256 "
            "(default with --out: a 'parts' folder beside the file; to stdout: not written).",
        ),
    ] = None,
) -> None:
    """Write a thread's whole history as JSONL, one message per line, oldest first.

    Messages a retention policy deleted are not in it: a note on stderr says how many,
    up to which seq and under which policy.

    Streams page by page: memory stays the same whatever the size of the thread.
    Each line is the message's fields plus "thread_id". The bytes of its images and
    files go beside it (see --parts-dir), each blob once; a line's parts name their file.
    """
    to_stdout = out_path is None or str(out_path) == "-"
    progress = ExportProgress(last_seq=after)
    pruned: RetentionMark | None = None
    files: PartFiles | None = None

    async def go() -> None:
        nonlocal pruned, files
        async with opened_store(settings_for(store)) as st:
            await st.get_thread(thread)  # an unknown thread leaves no file behind
            pruned = await st.retention_mark(thread)
            files = part_files(st, out_path if not to_stdout else None, parts_dir)
            if to_stdout:
                try:
                    await export_history(
                        st, thread, sys.stdout.buffer.write, after=after, progress=progress, parts=files
                    )
                    sys.stdout.buffer.flush()
                except DormantError:
                    if progress.messages:
                        resume = shlex.join(["dormant", "export", thread, "--after", str(progress.last_seq)])
                        err.print(
                            f"note: stopped after #{progress.last_seq}; resume with: {resume}", markup=False
                        )
                    raise
            else:
                assert out_path is not None
                try:
                    with atomic_file(out_path) as file:
                        await export_history(
                            st, thread, file.write, after=after, progress=progress, parts=files
                        )
                except OSError as exc:
                    raise DormantError(f"writing {str(out_path)!r} failed: {exc}") from exc

    try:
        run_async(go())
    except BrokenPipeError:
        # the reader went away (`dormant export T | head`): stop quietly, as cat does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise typer.Exit(1) from None
    if pruned is not None and after < pruned.up_to_seq:
        err.print(f"note: not in this export: {pruned_line(pruned)}", markup=False)
    if not quiet:
        where = "stdout" if to_stdout else str(out_path)
        summary = f"exported {progress.messages:,} messages ({progress.bytes:,} bytes) of thread {thread}"
        err.print(f"{summary} to {where}", markup=False)
        if files is not None and (files.written or files.kept):
            err.print(
                f"{files.written:,} part file(s) written ({files.bytes:,} bytes) in {files.folder}, "
                f"{files.kept:,} already there",
                markup=False,
            )
    if files is None and progress.parts:
        err.print(
            f"note: the bytes of {progress.parts:,} image(s) and file(s) were not written: give --parts-dir",
            markup=False,
        )


def part_files(store: Store, out_path: Path | None, parts_dir: Path | None) -> PartFiles | None:
    """Where an export writes its part files: ``parts_dir``, else a ``parts`` folder
    beside ``out_path``; None to stdout without ``parts_dir``. A line names a file by its
    path from the JSONL's folder (a ``parts_dir`` elsewhere: as given)."""
    if parts_dir is not None:
        folder = parts_dir
    elif out_path is not None:
        folder = out_path.parent / "parts"
    else:
        return None
    shown = str(folder)
    if out_path is not None:
        with contextlib.suppress(ValueError):
            shown = str(folder.resolve().relative_to(out_path.resolve().parent))
    return PartFiles(store, folder, shown)
