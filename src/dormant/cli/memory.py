"""``dormant memory``: add, search, show, history, forget, bind, rebind, dict load, ingest.

A subject is named by ``--subject KEY`` or by identity parts (``--identity
phone=+15550100 --identity device=ios-1``, bound and registered on the way).
Every listing is paged (``--limit``, ``--cursor``); ``--json`` prints one JSON
object per line. The memory lives in the store (`--store`, any store URL), in its tables.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import msgspec
import typer

from ..config import DEFAULT_STORE, Settings
from ..errors import DormantError, InvalidInput, UsageError
from ..memory.blocking import blocking
from ..memory.chunking import DEFAULT_CHUNK_CHARS, chunk_text
from ..memory.core import MemoryCore
from ..memory.dictionary import load_dictionary
from ..memory.embedder import Embedder, resolve_embedder
from ..memory.ranking import FilterSpec
from ..memory.records import DEFAULT_TENANT, MEMORY_KINDS, MemoryKind, MemoryRecord, NewMemory, TagValue
from ..store import open_store, store_options
from .base import StoreOpt, announce_if_new, err, fail, out

memory_app = typer.Typer(
    help="Long-term memory: records bound to identities, hybrid recall.", no_args_is_help=True
)
dict_app = typer.Typer(help="The business dictionary (synonym groups).", no_args_is_help=True)
memory_app.add_typer(dict_app, name="dict")


class EmbedderName(StrEnum):
    """Embedders the CLI can use."""

    minilm = "minilm"
    multilingual = "multilingual"
    hashing = "hashing"
    none = "none"


EmbedderOpt = Annotated[
    EmbedderName,
    typer.Option(
        "--embedder",
        envvar="DORMANT_MEMORY_EMBEDDER",
        help="minilm (default), multilingual (extra dormant[multilingual]), hashing, or none.",
    ),
]
TenantOpt = Annotated[
    str,
    typer.Option(
        "--tenant", envvar="DORMANT_TENANT", help="Tenant name or id (`dormant tenants`); default: none."
    ),
]
SubjectOpt = Annotated[
    list[str] | None,
    typer.Option("--subject", "-s", envvar="DORMANT_SUBJECT", help="Binding key (repeatable)."),
]
IdentityOpt = Annotated[
    list[str] | None,
    typer.Option("--identity", "-i", help="Identity part name=value (repeatable), bound into a key."),
]
JsonOpt = Annotated[bool, typer.Option("--json", envvar="DORMANT_JSON", help="One JSON object per line.")]
LimitOpt = Annotated[
    int, typer.Option("--limit", envvar="DORMANT_LIMIT", min=1, max=500, help="Items per page.")
]
CursorOpt = Annotated[str | None, typer.Option("--cursor", help="Cursor printed by the previous page.")]
TagOpt = Annotated[list[str] | None, typer.Option("--tag", "-t", help="Tag key=value (repeatable; typed).")]
KindOpt = Annotated[str, typer.Option("--kind", "-k", help="fact, preference, event, profile or knowledge.")]


def _embedder(name: EmbedderName) -> Embedder | None:
    return resolve_embedder(name.value)


@contextmanager
def opened(store: str, embedder: EmbedderName, tenant: str) -> Iterator[tuple[MemoryCore, str]]:
    """The memory of ``store`` (opened like every command opens it, its loop in a thread of
    its own) and the id of ``tenant`` (a name or id of the store's tenants, looked up;
    ``""``: the default tenant); expected errors become one ``error:`` line."""
    try:
        chosen = _embedder(embedder)  # refused (a missing extra) before the store is touched
        unopened = open_store(store, **store_options(store, Settings.from_env()))
        asyncio.run(announce_if_new(unopened))  # a missing store is created, as by every command
        with blocking(unopened) as (s, loops):
            tenant_id = loops.run(s.tenant(tenant)).id if tenant else DEFAULT_TENANT
            core = MemoryCore(s.memory_rows(), chosen)
            try:
                yield core, tenant_id
            finally:
                core.flush()
    except DormantError as exc:
        fail(exc)


def _pairs(items: list[str] | None, what: str) -> dict[str, str]:
    outp: dict[str, str] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            fail(InvalidInput(f"{what} {item!r} is not name=value"))
        outp[name.strip()] = value.strip()
    return outp


def parse_tag(value: str) -> TagValue:
    """A CLI tag value, typed: ``true``/``false``, an integer, a float, else text."""
    if value in ("true", "false"):
        return value == "true"
    for conv in (int, float):
        try:
            return conv(value)
        except ValueError:
            pass
    return value


def _tags(items: list[str] | None) -> dict[str, TagValue]:
    return {k: parse_tag(v) for k, v in _pairs(items, "tag").items()}


def _kind(kind: str) -> MemoryKind:
    if kind not in MEMORY_KINDS:
        fail(InvalidInput(f"unknown kind {kind!r}: one of {', '.join(sorted(MEMORY_KINDS))}"))
    return kind  # type: ignore[return-value]


def _subjects(
    core: MemoryCore, tenant: str, subject: list[str] | None, identity: list[str] | None
) -> list[str]:
    keys = list(subject or [])
    if identity:
        keys.append(core.bind(tenant, _pairs(identity, "identity")))
    if not keys:
        fail(UsageError("name the subject: --subject KEY or --identity name=value ..."))
    return keys


def _time(ts: float | None) -> str:
    return "-" if ts is None else datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _print(obj: Any, as_json: bool, line: str) -> None:
    if as_json:
        sys.stdout.write(msgspec.json.encode(obj).decode() + "\n")
    else:
        out.print(line, markup=False)


def _record_line(r: MemoryRecord) -> str:
    tags = " ".join(f"{k}={v}" for k, v in r.tags.items())
    state = "" if r.invalid_at is None else f" [invalid since {_time(r.invalid_at)}]"
    return f"{r.id}  {r.kind:<10} {_time(r.created_at)}  {r.text}{'  {' + tags + '}' if tags else ''}{state}"


def _footer(cursor: str | None, as_json: bool) -> None:
    if cursor is not None and not as_json:
        err.print(f"more: --cursor {cursor}", markup=False)
    elif cursor is not None:
        sys.stdout.write(msgspec.json.encode({"next_cursor": cursor}).decode() + "\n")


@memory_app.command()
def add(
    text: Annotated[str, typer.Argument(help="The memory's text.")],
    subject: SubjectOpt = None,
    identity: IdentityOpt = None,
    kind: KindOpt = "fact",
    tag: TagOpt = None,
    importance: Annotated[float, typer.Option(min=0.0, max=1.0, help="0..1.")] = 0.5,
    replaces: Annotated[list[str] | None, typer.Option("--replaces", help="Record id it supersedes.")] = None,
    valid_from: Annotated[
        datetime | None, typer.Option("--valid-from", help="When it became true (default: now).")
    ] = None,
    observed_at: Annotated[
        datetime | None, typer.Option("--observed-at", help="When it was seen (default: --valid-from).")
    ] = None,
    store: StoreOpt = DEFAULT_STORE,
    tenant: TenantOpt = DEFAULT_TENANT,
    embedder: EmbedderOpt = EmbedderName.minilm,
    as_json: JsonOpt = False,
) -> None:
    """Add one memory (it may supersede older ones with the same key tag)."""
    with opened(store, embedder, tenant) as (core, tenant):
        keys = _subjects(core, tenant, subject, identity)
        new = NewMemory(
            subject=keys[0],
            text=text,
            kind=_kind(kind),
            tags=_tags(tag),
            importance=importance,
            replaces=tuple(replaces or ()),
            valid_from=valid_from.timestamp() if valid_from else None,
            observed_at=observed_at.timestamp() if observed_at else None,
        )
        res = core.add(tenant, new, actor="cli")
        verdict = "duplicate of" if res.duplicate else "added"
        _print(
            {
                "id": res.record.id,
                "tenant": res.record.tenant,
                "duplicate": res.duplicate,
                "superseded": res.superseded,
            },
            as_json,
            f"{verdict} {res.record.id}"
            + (f" (supersedes {', '.join(res.superseded)})" if res.superseded else ""),
        )


@memory_app.command()
def search(
    query: Annotated[str, typer.Argument(help="What to recall (empty: the most recent).")] = "",
    subject: SubjectOpt = None,
    identity: IdentityOpt = None,
    kind: Annotated[list[str] | None, typer.Option("--kind", "-k", help="Only these kinds.")] = None,
    tag: TagOpt = None,
    k: Annotated[int, typer.Option("--k", min=1, max=100, help="Hits.")] = 5,
    at: Annotated[datetime | None, typer.Option("--at", help="Recall what was valid at this time.")] = None,
    history: Annotated[bool, typer.Option("--history", help="Superseded records too.")] = False,
    explain: Annotated[bool, typer.Option("--explain", help="Why each hit ranked where it did.")] = False,
    store: StoreOpt = DEFAULT_STORE,
    tenant: TenantOpt = DEFAULT_TENANT,
    embedder: EmbedderOpt = EmbedderName.minilm,
    as_json: JsonOpt = False,
) -> None:
    """Recall: structure's answers first (the current value of a key, the newest event),
    then full text, vectors, decay, importance."""
    with opened(store, embedder, tenant) as (core, tenant):
        keys = _subjects(core, tenant, subject, identity)
        res = core.recall(
            tenant,
            keys,
            query,
            kinds=[_kind(x) for x in kind or []],
            tags=_tags(tag),
            k=k,
            at=at.timestamp() if at else None,
            history=history,
            explain=explain,
        )
        for note in res.degraded:
            err.print(f"note: {note}", markup=False)
        for h in res.hits:
            why = h.explain or {}
            line = f"{h.score:.5f}  {_record_line(h.record)}"
            if why:
                parts = ", ".join(f"{k}={v}" for k, v in why.items() if k != "intent" and v not in (None, ""))
                line += f"\n    why: {why.get('structure') or 'hybrid'}; {parts}; intent: {why.get('intent')}"
            body: dict[str, object] = {"score": h.score, "record": h.record}
            if why:
                body["explain"] = why
            _print(body, as_json, line)


@memory_app.command()
def show(
    record: Annotated[
        str | None, typer.Argument(help="A record id (default: list the subject's records).")
    ] = None,
    subject: SubjectOpt = None,
    identity: IdentityOpt = None,
    history: Annotated[bool, typer.Option("--history", help="Superseded and forgotten records too.")] = False,
    limit: LimitOpt = 50,
    cursor: CursorOpt = None,
    store: StoreOpt = DEFAULT_STORE,
    tenant: TenantOpt = DEFAULT_TENANT,
    as_json: JsonOpt = False,
) -> None:
    """One record, or the subject's records newest first (paged)."""
    with opened(store, EmbedderName.none, tenant) as (core, tenant):
        keys = _subjects(core, tenant, subject, identity)
        if record is not None:
            r = core.get(tenant, keys, record)
            _print(r, as_json, _record_line(r))
            return
        page = core.list(tenant, keys, spec=FilterSpec(history=history), cursor=cursor, limit=limit)
        for r in page.items:
            _print(r, as_json, _record_line(r))
        _footer(page.next_cursor, as_json)


@memory_app.command("history")
def history_cmd(
    subject: SubjectOpt = None,
    identity: IdentityOpt = None,
    record: Annotated[str | None, typer.Option("--record", help="Only this record's changes.")] = None,
    limit: LimitOpt = 50,
    cursor: CursorOpt = None,
    store: StoreOpt = DEFAULT_STORE,
    tenant: TenantOpt = DEFAULT_TENANT,
    as_json: JsonOpt = False,
) -> None:
    """Every change of the subject's memories, oldest first (paged)."""
    with opened(store, EmbedderName.none, tenant) as (core, tenant):
        keys = _subjects(core, tenant, subject, identity)
        page = core.history(tenant, keys, record_id=record, cursor=cursor, limit=limit)
        for c in page.items:
            _print(
                c,
                as_json,
                f"{c.seq:>8}  {_time(c.at)}  {c.op:<9} {c.record_id or '-'}  {c.actor}  {c.detail}",
            )
        _footer(page.next_cursor, as_json)


@memory_app.command()
def forget(
    record: Annotated[str, typer.Argument(help="The record id.")],
    subject: SubjectOpt = None,
    identity: IdentityOpt = None,
    reason: Annotated[str, typer.Option("--reason", help="Why (kept in the history).")] = "",
    store: StoreOpt = DEFAULT_STORE,
    tenant: TenantOpt = DEFAULT_TENANT,
) -> None:
    """Invalidate one record (it stays in the history)."""
    with opened(store, EmbedderName.none, tenant) as (core, tenant):
        core.forget(tenant, _subjects(core, tenant, subject, identity), record, actor="cli", reason=reason)
        out.print(f"forgot {record}", markup=False)


@memory_app.command("bind")
def bind_cmd(
    parts: Annotated[list[str], typer.Argument(help="Identity parts name=value (phone=..., device=...).")],
    store: StoreOpt = DEFAULT_STORE,
    tenant: TenantOpt = DEFAULT_TENANT,
    register: Annotated[
        bool, typer.Option(help="Record the parts in the link table (partial lookups).")
    ] = True,
) -> None:
    """Print the binding key of an identity."""
    identity = _pairs(parts, "identity part")
    with opened(store, EmbedderName.none, tenant) as (core, tenant):
        key = core.bind(tenant, identity) if register else core.key(tenant, identity)
        out.print(key, markup=False)


@memory_app.command()
def rebind(
    old: Annotated[str, typer.Argument(help="The old binding key.")],
    new: Annotated[str, typer.Argument(help="The new binding key.")],
    mode: Annotated[str, typer.Option("--mode", help="move, merge, link or unlink.")] = "move",
    store: StoreOpt = DEFAULT_STORE,
    tenant: TenantOpt = DEFAULT_TENANT,
) -> None:
    """Move (or merge) OLD's memories to NEW, or link/unlink the two keys."""
    with opened(store, EmbedderName.none, tenant) as (core, tenant):
        n = core.rebind(tenant, old, new, mode=mode, actor="cli")  # type: ignore[arg-type]
        out.print(f"{mode}: {n} {'records' if mode in ('move', 'merge') else 'links'}", markup=False)


@dict_app.command("load")
def dict_load(
    file: Annotated[Path, typer.Argument(help="Synonym groups: .json, .toml or .csv.")],
    store: StoreOpt = DEFAULT_STORE,
    tenant: TenantOpt = DEFAULT_TENANT,
) -> None:
    """Replace the tenant's synonym groups."""
    with opened(store, EmbedderName.none, tenant) as (core, tenant):
        n = core.save_dictionary(tenant, load_dictionary(file))
        out.print(f"{n} synonym groups loaded", markup=False)


@dict_app.command("show")
def dict_show(
    store: StoreOpt = DEFAULT_STORE,
    tenant: TenantOpt = DEFAULT_TENANT,
    as_json: JsonOpt = False,
) -> None:
    """Print the tenant's synonym groups (one group a line)."""
    with opened(store, EmbedderName.none, tenant) as (core, tenant):
        for group in core.dictionary_groups(tenant):
            _print({"group": group}, as_json, " ≈ ".join(group))


def knowledge_key(core: MemoryCore, tenant: str) -> str:
    """The subject of a tenant's knowledge documents (``tenant``: its id, ``""`` the default)."""
    return core.bind(tenant, {"knowledge": tenant or "default"})


@memory_app.command()
def ingest(
    files: Annotated[list[Path], typer.Argument(help="Text or Markdown documents.")],
    chunk_chars: Annotated[int, typer.Option("--chunk-chars", min=50, max=8000)] = DEFAULT_CHUNK_CHARS,
    store: StoreOpt = DEFAULT_STORE,
    tenant: TenantOpt = DEFAULT_TENANT,
    embedder: EmbedderOpt = EmbedderName.minilm,
) -> None:
    """Add documents as knowledge, chunked; re-ingesting a file supersedes its old chunks.

    The chunks belong to the tenant's knowledge subject (printed), tagged doc=NAME, chunk=N.
    """
    with opened(store, embedder, tenant) as (core, tenant):
        key = knowledge_key(core, tenant)
        for path in files:
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                fail(InvalidInput(f"cannot read {path}: {exc}"))
            chunks = chunk_text(text, chunk_chars)
            for start in range(0, len(chunks), 200):
                batch = [
                    NewMemory(
                        subject=key,
                        kind="knowledge",
                        text=c,
                        tags={"doc": path.name, "chunk": i, "key": f"{path.name}#{i}"},
                    )
                    for i, c in enumerate(chunks[start : start + 200], start)
                ]
                core.add_many(tenant, batch, actor="cli")
            out.print(f"{path}: {len(chunks)} chunks", markup=False)
        out.print(f"knowledge subject: {key}", markup=False)
