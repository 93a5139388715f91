"""The statements of ``dormant doctor`` on PostgreSQL (:mod:`.doctor`): reads only.

Times are the server's (``%(now)s`` is its ``clock_timestamp()`` as epoch seconds, read
first), as the leases are; ``%(dead)s`` is how long a worker may go without a heartbeat
before its leases are free to others (the backend's ``dead_after_s``).
"""

from __future__ import annotations

# a session that cannot write, and gives up on a statement stuck behind a lock
SESSION = (
    "SELECT set_config('default_transaction_read_only', 'on', false),"
    " set_config('statement_timeout', %s, false)"
)
SERVER = (
    "SELECT extract(epoch FROM clock_timestamp())::float8, current_setting('server_version'),"
    " pg_is_in_recovery(), current_schema()"
)
SCHEMA_EXISTS = "SELECT to_regclass(format('%I.schema_version', current_schema())) IS NOT NULL"
TABLES = (
    "SELECT c.relname FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace"
    " AND c.relkind IN ('r', 'p')"
)
VERSION = "SELECT max(version) FROM schema_version"
THREADS = "SELECT COUNT(*) FROM threads"
FAILED = "SELECT COUNT(*) FROM threads WHERE status = 'failed'"
FAILED_SAMPLE = (
    "SELECT id, failures, error FROM threads WHERE status = 'failed' ORDER BY updated_at DESC"
    " LIMIT %(sample)s"
)
_DEAD = "SELECT id FROM workers WHERE heartbeat_at < now() - make_interval(secs => %(dead)s)"
# a lease counts as live until it expires or its worker stopped heartbeating (the claim's rule)
_LAPSED = f"lease_token IS NOT NULL AND (lease_expires <= %(now)s OR lease_owner IN ({_DEAD}))"
EXPIRED = f"SELECT COUNT(*) FROM threads WHERE {_LAPSED}"
EXPIRED_SAMPLE = (
    f"SELECT id, coalesce(lease_owner, '?') FROM threads WHERE {_LAPSED} ORDER BY lease_expires"
    " LIMIT %(sample)s"
)
# ready for longer than the threshold, and no live lease on it: nobody took it
OVERDUE_THREADS = (
    "SELECT COUNT(*) FROM threads WHERE ready_key IS NOT NULL AND ready_key <= %(overdue)s"
    f" AND (lease_token IS NULL OR lease_expires <= %(now)s OR lease_owner IN ({_DEAD}))"
)
OUTBOX_BY_STATUS = "SELECT status, COUNT(*) FROM outbox GROUP BY status"
EXPIRED_CALLS = (
    "SELECT COUNT(*) FROM outbox WHERE status = 'running'"
    f" AND (lease_expires <= %(now)s OR lease_owner IN ({_DEAD}))"
)
OVERDUE_CALLS = "SELECT COUNT(*) FROM outbox WHERE status = 'pending' AND available_at <= %(overdue)s"
# a dead-lettered or unknown call must have had its (error) result admitted to its
# thread in the same transaction: its dedup key (the call id) is then known
_UNDELIVERED = (
    "FROM outbox o WHERE o.status IN ('dead', 'unknown') AND NOT EXISTS "
    "(SELECT 1 FROM input_keys k WHERE k.thread_id = o.thread_id AND k.dedup_key = o.call_id)"
)
UNDELIVERED = f"SELECT COUNT(*) {_UNDELIVERED}"
UNDELIVERED_SAMPLE = f"SELECT o.thread_id, o.call_id, o.status {_UNDELIVERED} ORDER BY o.id LIMIT %(sample)s"
# a thread waits for `awaiting` results: each is an open call, a call waiting for a
# person's decision, or an admitted result
_STALLED = """
FROM (
    SELECT t.id, t.awaiting,
        (SELECT COUNT(*) FROM outbox o WHERE o.thread_id = t.id
         AND o.status IN ('pending', 'running', 'external'))
      + (SELECT COUNT(*) FROM approvals a WHERE a.thread_id = t.id AND a.status IN ('requested', 'escalated'))
      + (SELECT COUNT(*) FROM inputs i WHERE i.thread_id = t.id AND i.kind = 'tool_result') AS n
    FROM threads t WHERE t.awaiting > 0) s
WHERE s.n < s.awaiting
"""
STALLED = f"SELECT COUNT(*) {_STALLED}"
STALLED_SAMPLE = f"SELECT id, awaiting, n {_STALLED} ORDER BY id LIMIT %(sample)s"
# every worker row, with how long ago it beat and what it holds now
WORKERS = """
SELECT w.id, w.host, w.pid, extract(epoch FROM now() - w.heartbeat_at)::float8,
    (SELECT COUNT(*) FROM threads t WHERE t.lease_owner = w.id AND t.lease_token IS NOT NULL),
    (SELECT COUNT(*) FROM outbox o WHERE o.lease_owner = w.id AND o.status = 'running')
FROM workers w ORDER BY w.heartbeat_at LIMIT %(limit)s
"""
WORKER_COUNT = "SELECT COUNT(*) FROM workers"
# replication, seen from a primary: each standby, its state and how far it is behind
STANDBYS = """
SELECT application_name, coalesce(host(client_addr), 'local'), state, sync_state,
    coalesce(extract(epoch FROM replay_lag)::float8, 0),
    coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn), 0)::float8
FROM pg_stat_replication ORDER BY application_name LIMIT %(limit)s
"""
SYNC_NAMES = "SELECT current_setting('synchronous_standby_names')"
# on a standby: how old the last transaction it replayed is
REPLAY_AGE = "SELECT extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8"
# amcheck: installed in this database? (doctor never installs it: that is a write)
AMCHECK = (
    "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace"
    " WHERE e.extname = 'amcheck'"
)
AMCHECK_AVAILABLE = "SELECT COUNT(*) FROM pg_available_extensions WHERE name = 'amcheck'"
# the store's B-tree indexes (those amcheck verifies), valid and ready
STORE_INDEXES = """
SELECT c.oid::regclass::text, c.oid FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_am am ON am.oid = c.relam
WHERE c.relnamespace = current_schema()::regnamespace AND am.amname = 'btree'
  AND i.indisvalid AND i.indisready AND c.relpersistence <> 't'
ORDER BY c.relname
"""
# bt_index_check takes only an AccessShareLock: it runs beside the workers
BT_CHECK = "SELECT {schema}.bt_index_check(%s::regclass, %s)"
