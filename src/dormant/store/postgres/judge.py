"""``dormant doctor``'s verdict on a PostgreSQL store: its facts (:mod:`.doctor`) judged into
:class:`~dormant.store.health.Finding` rows, with the same checks and levels as on SQLite
where they apply (:func:`~dormant.store.health.judge_work`) and those of a server:
``connect``, ``amcheck``, ``workers`` (heartbeats), ``replication``."""

from __future__ import annotations

import msgspec

from ...urls import redact
from ..health import Finding, Level, Report, judge_schema, judge_work
from .doctor import PgFacts, inspect_postgres

#: A standby further behind than this (seconds of replay, or bytes of WAL) needs a look.
LAG_WARN_S = 30.0
LAG_WARN_BYTES = 256 * 1024 * 1024


def diagnose(url: str, *, quick: bool, stuck_after_s: float, dead_after_s: float) -> Report:
    """Examine the store at ``url`` read-only through a plain connection (the report shows
    the URL without its password)."""
    facts = inspect_postgres(url, quick=quick, stuck_after_s=stuck_after_s, dead_after_s=dead_after_s)
    shown = redact(url)
    return Report(
        store=shown,
        findings=tuple(judge_postgres(facts, shown, stuck_after_s)),
        facts=msgspec.to_builtins(facts),
    )


def judge_postgres(facts: PgFacts, url: str, stuck_after_s: float) -> list[Finding]:
    """Turn the facts of a PostgreSQL store into findings (``url`` already redacted)."""
    if facts.connect_error is not None:
        return [
            Finding(
                "connect",
                "fail",
                f"cannot connect: {facts.connect_error}",
                hint="is the server up and reachable from here, and are the user and database right?",
            )
        ]
    restore = (
        "stop every worker on this database, then restore it from a backup (pg_basebackup / "
        "point-in-time recovery) or fail over to a healthy standby"
    )
    out = [
        Finding(
            "server",
            "ok" if not facts.in_recovery else "warn",
            f"PostgreSQL {facts.server_version} at {facts.host}, schema {facts.schema!r}"
            + (", a standby in recovery (read-only)" if facts.in_recovery else ""),
            hint="workers need the primary: name every host with target_session_attrs=read-write"
            if facts.in_recovery
            else None,
        )
    ]
    out.extend(_replication(facts))
    if facts.schema_version is None and facts.read_errors:
        out.append(Finding("reads", "fail", "this is not a dormant store", tuple(facts.read_errors), restore))
        return out
    out.append(judge_schema(facts, url, restore))
    if facts.amcheck == "checked":
        if facts.amcheck_errors:
            out.append(
                Finding(
                    "amcheck",
                    "fail",
                    f"bt_index_check found damage in {facts.amcheck_failed} of "
                    f"{facts.amcheck_indexes} index(es)",
                    tuple(facts.amcheck_errors[:10]),
                    "REINDEX the damaged indexes (REINDEX INDEX CONCURRENTLY); if tables are damaged, "
                    + restore,
                )
            )
        else:
            out.append(Finding("amcheck", "ok", f"bt_index_check: {facts.amcheck_indexes} index(es) ok"))
    elif facts.amcheck != "skipped":
        how = (
            "`CREATE EXTENSION amcheck` (as a superuser) lets doctor verify the indexes"
            if facts.amcheck == "available"
            else "this server has no amcheck extension"
        )
        out.append(Finding("amcheck", "info", f"indexes not verified: {how}"))
    out.append(_workers(facts))
    out.extend(judge_work(facts, url, stuck_after_s))
    if facts.read_errors:
        out.append(
            Finding(
                "reads", "fail", "parts of the store could not be read", tuple(facts.read_errors), restore
            )
        )
    return out


def _workers(facts: PgFacts) -> Finding:
    silent = [w for w in facts.worker_rows if w[3] > facts.dead_after_s]
    holding = [w for w in silent if w[4] or w[5]]
    # late: half the way to dead, still holding leases (a partition or a kill -9 shows here first)
    late = [
        w for w in facts.worker_rows if facts.dead_after_s / 2 < w[3] <= facts.dead_after_s and (w[4] or w[5])
    ]
    details = tuple(
        f"{wid} (pid {pid} on {host}): {'no heartbeat' if age > facts.dead_after_s else 'heartbeat late'} "
        f"for {age:.1f} s, holds {threads} thread and {calls} call lease(s)"
        for wid, host, pid, age, threads, calls in (silent + late)[:10]
    )
    live = facts.workers - len(silent)
    summary = f"{live} worker(s) heartbeating, {len(silent)} silent for over {facts.dead_after_s:g} s"
    if late:
        summary += f", {len(late)} late"
    if holding:
        return Finding(
            "workers",
            "warn",
            summary + f"; {len(holding)} silent one(s) still hold leases",
            details,
            "a live worker takes their leases over at its next claim; if none runs, start one",
        )
    return Finding("workers", "ok" if not (silent or late) else "info", summary, details)


def _replication(facts: PgFacts) -> list[Finding]:
    if facts.in_recovery:
        age = facts.replay_age_s
        shown = "no transaction replayed yet" if age is None else f"last transaction replayed {age:.1f} s ago"
        return [Finding("replication", "info", f"connected to a standby: {shown}")]
    if not facts.sync_standby_names and not facts.standbys:
        return [Finding("replication", "info", "no standby configured or connected")]
    out: list[Finding] = []
    details = tuple(
        f"{name} at {addr}: {state}, {sync}, replay lag {lag:.2f} s, {behind / 1024:,.0f} KiB behind"
        for name, addr, state, sync, lag, behind in facts.standbys
    )
    synced = [s for s in facts.standbys if s[3] in ("sync", "quorum") and s[2] == "streaming"]
    if facts.sync_standby_names and not synced:
        out.append(
            Finding(
                "replication",
                "fail",
                f"synchronous_standby_names = {facts.sync_standby_names!r} but no synchronous standby "
                "is streaming: every commit waits",
                details,
                "start the standby (or clear synchronous_standby_names to run without the guarantee)",
            )
        )
        return out
    behind = [s for s in facts.standbys if s[4] > LAG_WARN_S or s[5] > LAG_WARN_BYTES]
    mode = "synchronous" if synced else "asynchronous"
    level: Level = "warn" if behind else "ok"
    summary = f"{len(facts.standbys)} standby(s), {mode}" + (f"; {len(behind)} far behind" if behind else "")
    hint = (
        "a standby far behind loses that much on failover (asynchronous) or slows commits" if behind else None
    )
    out.append(Finding("replication", level, summary, details, hint))
    return out
