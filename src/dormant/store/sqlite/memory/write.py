"""Write steps of the SQLite store's memory rows that run inside a transaction the caller
holds: a key through its moves, a history row, a forget, a rebind or (un)link.

:class:`~dormant.store.sqlite.memory.rows.SQLiteMemoryBackend` runs them as writer jobs of
their own, and a slice's commit runs the forget inside its own job (same transaction as
its messages). No rule of :class:`~dormant.memory.core.MemoryCore` is decided here.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ....errors import StoreError, UsageError
from ....memory.backend import RebindMode
from ....memory.fulltext import index_text
from .sql import Conn
from .sql import marks as _in

#: Longest chain of moves a key is followed through.
MAX_MOVES = 16


def resolve(c: Conn, tenant: str, key: str) -> str:
    """``key`` through its moves (rebinds): the key its memories live under now."""
    for _ in range(MAX_MOVES):
        row = c.execute(
            "SELECT new_key FROM memory_moves WHERE tenant = ? AND old_key = ?", (tenant, key)
        ).fetchone()
        if row is None:
            return key
        key = row[0]
    raise StoreError(f"memory move chain of {key} is longer than {MAX_MOVES}")


def history(
    c: Conn,
    tenant: str,
    op: str,
    subject: str,
    rec: str | None,
    actor: str,
    at: float,
    detail: str = "",
) -> None:
    """One row of the memory history."""
    c.execute(
        "INSERT INTO memory_history (tenant, op, subject, record_id, actor, at, detail) "
        "VALUES (?,?,?,?,?,?,?)",
        (tenant, op, subject, rec, actor, at, detail),
    )


def forget(
    c: Conn, tenant: str, keys: Sequence[str], record_id: str, now: float, actor: str, reason: str
) -> bool:
    """Invalidate one valid record of ``keys``; False when there is none."""
    row = c.execute(
        "SELECT subject FROM memory_records WHERE tenant = ? AND id = ? "
        f"AND subject IN ({_in(keys)}) AND invalid_at IS NULL",
        (tenant, record_id, *keys),
    ).fetchone()
    if row is None:
        return False
    c.execute(
        "UPDATE memory_records SET invalid_at = max(valid_from, ?) WHERE tenant = ? AND id = ?",
        (now, tenant, record_id),
    )
    history(c, tenant, "forget", row[0], record_id, actor, now, reason)
    return True


def rebind(
    c: Conn, tenant: str, old: str, new: str, mode: RebindMode, now: float, actor: str, *, vectors: bool
) -> int:
    """Move or merge ``old``'s records to ``new`` (``vectors``: the vector table exists),
    or link/unlink the keys; the records moved (or links changed)."""
    if mode in ("link", "unlink"):
        return link(c, tenant, old, new, mode, now, actor)
    target = resolve(c, tenant, new)
    if target == old:
        raise UsageError("cannot move a subject onto itself")
    op = mode if mode == "merge" else "rebind"
    dups = c.execute(
        "SELECT a.id, b.id FROM memory_records a JOIN memory_records b ON b.tenant = a.tenant "
        "AND b.subject = ? AND b.content_hash = a.content_hash AND b.invalid_at IS NULL "
        "WHERE a.tenant = ? AND a.subject = ? AND a.invalid_at IS NULL",
        (target, tenant, old),
    ).fetchall()
    for a_id, b_id in dups:
        c.execute(
            "UPDATE memory_records SET invalid_at = max(valid_from, ?) WHERE tenant = ? AND id = ?",
            (now, tenant, a_id),
        )
        history(c, tenant, "merge", old, a_id, actor, now, f"duplicate of {b_id}")
    rows = c.execute(
        "SELECT rid, id, text FROM memory_records WHERE tenant = ? AND subject = ?", (tenant, old)
    ).fetchall()
    for rid, rec_id, text in rows:
        c.execute("UPDATE memory_records SET subject = ? WHERE rid = ?", (target, rid))
        c.execute("DELETE FROM memory_fts WHERE rowid = ?", (rid,))
        c.execute(
            "INSERT INTO memory_fts (rowid, scope, body) VALUES (?, ?, ?)", (rid, target, index_text(text))
        )
        if vectors:
            vec = c.execute("SELECT embedding FROM memory_vec WHERE rowid = ?", (rid,)).fetchone()
            if vec is not None:
                c.execute("DELETE FROM memory_vec WHERE rowid = ?", (rid,))
                c.execute(
                    "INSERT INTO memory_vec (rowid, subject, embedding) VALUES (?, ?, ?)",
                    (rid, target, vec[0]),
                )
        history(c, tenant, op, target, rec_id, actor, now, f"{old} -> {target}")
    c.execute("UPDATE memory_moves SET new_key = ? WHERE tenant = ? AND new_key = ?", (target, tenant, old))
    c.execute("INSERT OR REPLACE INTO memory_moves VALUES (?, ?, ?, ?)", (tenant, old, target, now))
    c.execute(
        "UPDATE OR IGNORE memory_identity SET key = ? WHERE tenant = ? AND key = ?", (target, tenant, old)
    )
    if not rows:
        history(c, tenant, op, target, None, actor, now, f"{old} -> {target}")
    return len(rows)


def link(c: Conn, tenant: str, a: str, b: str, mode: str, now: float, actor: str) -> int:
    """Link or unlink two keys (both directions); how many links changed (0 or 1)."""
    if a == b:
        raise UsageError("cannot link a key to itself")
    changed = 0
    for x, y in ((a, b), (b, a)):
        if mode == "link":
            c.execute("INSERT OR IGNORE INTO memory_links VALUES (?, ?, ?, ?)", (tenant, x, y, now))
        else:
            c.execute("DELETE FROM memory_links WHERE tenant = ? AND key = ? AND other = ?", (tenant, x, y))
        changed += c.changes()
    if changed:
        history(c, tenant, mode, a, None, actor, now, f"{a} <-> {b}")
    return changed // 2


def migrate_key(
    c: Conn,
    tenant: str,
    old: str,
    new: str,
    legacy: dict[str, str],
    now: float,
    actor: str,
    *,
    vectors: bool,
) -> int | None:
    """Move key ``old`` of the previous scheme to ``new`` (see
    :meth:`~dormant.memory.backend.MemoryBackend.migrate_key`); the records moved, None
    when there was nothing to move (``old`` unknown here, or moved already)."""
    for part, h in legacy.items():  # the unkeyed part hashes would reveal the parts
        c.execute(
            "DELETE FROM memory_identity WHERE tenant = ? AND part = ? AND part_hash = ? AND key IN (?, ?)",
            (tenant, part, h, old, new),
        )
    if c.execute("SELECT 1 FROM memory_moves WHERE tenant = ? AND old_key = ?", (tenant, old)).fetchone():
        return None
    (known,) = c.execute(
        "SELECT EXISTS (SELECT 1 FROM memory_records WHERE tenant = ?1 AND subject = ?2) "
        "OR EXISTS (SELECT 1 FROM memory_links WHERE tenant = ?1 AND key = ?2) "
        "OR EXISTS (SELECT 1 FROM memory_history WHERE tenant = ?1 AND subject = ?2) "
        "OR EXISTS (SELECT 1 FROM threads WHERE tenant = ?1 AND subject = ?2)",
        (tenant, old),
    ).fetchone()
    if not known:
        return None
    moved = rebind(c, tenant, old, new, "move", now, actor, vectors=vectors)
    # the same identity, re-keyed: its history reads under the new key (no old key left in it)
    c.execute("UPDATE memory_history SET subject = ? WHERE tenant = ? AND subject = ?", (new, tenant, old))
    for column in ("key", "other"):
        c.execute(
            f"UPDATE OR IGNORE memory_links SET {column} = ? WHERE tenant = ? AND {column} = ?",
            (new, tenant, old),
        )
    c.execute(
        "DELETE FROM memory_links WHERE tenant = ? AND (key = ?2 OR other = ?2 OR key = other)", (tenant, old)
    )
    # the threads whose subject it is: a journaled change of their `_subject` register
    # (time travel and recovery see the new key from here on) and their row
    value = msgspec.json.encode(new).decode()
    threads = c.execute(
        "SELECT id, runs, last_seq FROM threads WHERE tenant = ? AND subject = ?", (tenant, old)
    ).fetchall()
    for thread_id, runs, last_seq in threads:
        (top,) = c.execute(
            "SELECT coalesce(max(seq), 0) FROM state_journal WHERE thread_id = ?", (thread_id,)
        ).fetchone()
        c.execute(
            "INSERT INTO state_journal (thread_id, seq, kind, key, value, run, created_at, msg_seq) "
            "VALUES (?, ?, 'update', '_subject', ?, ?, ?, ?)",
            (thread_id, int(top) + 1, value, runs, now, last_seq),
        )
        c.execute(
            "UPDATE threads SET subject = ?1, state = CASE WHEN state IS NULL THEN NULL "
            "ELSE json_set(state, '$._subject', ?2) END WHERE id = ?3",
            (new, value, thread_id),
        )
    return moved
