"""Every SQL statement the PostgreSQL backend sends, by name.

The multi-row write paths are functions in ``schema.sql`` (``dormant_*``: one
statement per domain operation, so a slice commit is one round trip); the statements
here call them, or are the single-row writes and the reads. No other module of the
backend holds SQL text.
"""

from __future__ import annotations

from ..rows import (
    INPUT_COLS,
    JOURNAL_COLS,
    MESSAGE_COLS,
    OUTBOX_COLS,
    SUMMARY_COLS,
    THREAD_COLS,
    THREAD_TABLES,
    TIER_SIZES_TAIL,
)

# The multi-row operations take their records as one jsonb document (msgspec encoding).
ADMIT = "SELECT r_input_id, r_duplicate FROM dormant_admit_v2(%s::jsonb, %s::float8[], %s::float8)"
COMMIT_SLICE = "SELECT dormant_commit_slice_parts(%s::jsonb, %s::float8[], %s::float8)"
FINISH_OUTBOX = "SELECT held FROM dormant_finish_outbox(%s::jsonb, %s::float8, %s::float8) AS held"
CLAIM_OUTBOX = (
    f"SELECT {OUTBOX_COLS} FROM dormant_claim_outbox(%s, %s::integer, %s, %s::float8, %s::float8, "
    "%s::float8, %s, %s::float8, %s::text[])"
)
COMPLETE_CALL = (
    "SELECT r_input_id, r_duplicate FROM dormant_complete_call(%s, %s, %s, %s, %s::float8, %s::float8)"
)
CREATE_THREAD = f"SELECT {THREAD_COLS} FROM dormant_create_thread(%s, %s, %s::float8)"
# The claim, fair across tenants (the rule: dormant.store.fairness), in one statement:
# `ready_tenants` skip-scans threads_ready for the tenants with ready work, `candidates`
# takes each one's best %(limit)s claimable threads (dormant_tenant_claimable: locked,
# SKIP LOCKED, rows another claim holds are skipped, not waited for; the few locked but
# not leased here are free again at COMMIT) and places its k-th at (live leases of its
# tenant + k); the %(limit)s best places within %(cap)s are leased. A lease counts as
# live until it expires or its worker stopped heartbeating %(dead)s seconds ago
# (database clock): then its thread is claimable.
CLAIM_THREADS = """
WITH RECURSIVE dead AS (
    SELECT id FROM workers WHERE heartbeat_at < now() - make_interval(secs => %(dead)s)
), ready_tenants AS (
    (SELECT tenant FROM threads WHERE ready_key IS NOT NULL ORDER BY tenant LIMIT 1)
    UNION ALL
    SELECT (SELECT t.tenant FROM threads t
            WHERE t.ready_key IS NOT NULL AND t.tenant > ready_tenants.tenant ORDER BY t.tenant LIMIT 1)
    FROM ready_tenants WHERE ready_tenants.tenant IS NOT NULL
), held AS (
    SELECT tenant, count(*) AS n FROM threads
    WHERE lease_token IS NOT NULL AND lease_expires > %(now)s
      AND lease_owner NOT IN (SELECT id FROM dead)
    GROUP BY tenant
), candidates AS (
    SELECT c.id, c.ready_key,
        coalesce(h.n, 0) + row_number() OVER (PARTITION BY ready_tenants.tenant ORDER BY c.ready_key) AS place
    FROM ready_tenants
    CROSS JOIN LATERAL dormant_tenant_claimable(
        ready_tenants.tenant, %(now)s::float8, %(limit)s::integer, %(agents)s::text[], %(dead)s::float8
    ) AS c (id, ready_key)
    LEFT JOIN held h ON h.tenant = ready_tenants.tenant
    WHERE ready_tenants.tenant IS NOT NULL
), picked AS (
    SELECT id, ready_key FROM candidates
    WHERE %(cap)s::integer = 0 OR place <= %(cap)s::integer
    ORDER BY place, ready_key
    LIMIT %(limit)s
)
UPDATE threads t SET lease_token = %(token)s, lease_owner = %(worker)s, lease_expires = %(expires)s,
    failures = t.failures + 1
FROM picked WHERE t.id = picked.id
RETURNING t.id, picked.ready_key, t.agent, t.failures
"""
RENEW_LEASES = """
UPDATE threads t SET lease_expires = %s
FROM unnest(%s::text[], %s::text[]) AS c (id, token)
WHERE t.id = c.id AND t.lease_token = c.token
RETURNING t.id
"""
# A failed thread is not ready (ready_key NULL) until retry_thread recomputes it. The
# claim counted an attempt (failures + 1); a release without an error gives it back.
# A wait reason (the model endpoint is down) is kept until the thread's next release,
# commit or retry; its until is the retry time.
RELEASE = """
UPDATE threads SET lease_token = NULL, lease_owner = NULL, lease_expires = %(retry_at)s,
    failures = greatest(0, failures + %(inc)s), error = coalesce(%(error)s, error),
    wait_reason = %(wait)s::text,
    wait_until = CASE WHEN %(wait)s::text IS NULL THEN 0 ELSE %(retry_at)s END,
    status = CASE WHEN %(fail)s THEN 'failed' ELSE status END, updated_at = %(now)s,
    ready_key = CASE WHEN %(fail)s THEN NULL ELSE ready_key END,
    ready_at = CASE WHEN %(fail)s THEN NULL ELSE ready_at END
WHERE id = %(id)s AND lease_token = %(token)s
"""
# The model endpoint a thread waits on answers again: claimable now (a held lease is left alone).
WAKE_WAITING = """
UPDATE threads SET lease_expires = %(now)s, wait_until = %(now)s
WHERE wait_reason IS NOT NULL AND lease_token IS NULL AND lease_expires > %(now)s
  AND strpos(wait_reason, %(endpoint)s::text) > 0
"""
# A live lease is left alone: the slice running under it keeps its thread.
RETRY_THREAD = f"""
UPDATE threads t SET status = 'active', failures = 0, error = NULL, updated_at = %(now)s,
    wait_reason = NULL, wait_until = 0,
    lease_expires = CASE WHEN t.lease_token IS NOT NULL AND t.lease_expires > %(now)s
                         THEN t.lease_expires ELSE 0 END,
    ready_key = (SELECT min(i.sort_key) FROM inputs i
                 WHERE i.thread_id = t.id AND (t.awaiting = 0 OR i.kind = 'tool_result')),
    ready_at = (SELECT min(i.not_before) FROM inputs i
                WHERE i.thread_id = t.id AND (t.awaiting = 0 OR i.kind = 'tool_result'))
WHERE t.id = %(id)s
RETURNING {", ".join("t." + c.strip() for c in THREAD_COLS.split(","))}
"""
# Lock the thread rows a batch will change, in id order, before it changes them: two
# batches (of two workers) then never wait for each other in a cycle.
LOCK_THREADS = """
SELECT 1 FROM threads
WHERE id = ANY (%s::text[]) OR id IN (SELECT thread_id FROM outbox WHERE id = ANY (%s::bigint[]))
ORDER BY id
FOR NO KEY UPDATE
"""
# The thread row and its ready inputs (admission order) in one statement: at most
# %(limit)s of them and no more input text than %(bytes)s bytes (the first input always).
# The sizes come from octet_length, which reads no TOASTed text, so no input past the cut
# is read at all.
LOAD_SLICE = f"""
SELECT {", ".join("t." + c.strip() for c in THREAD_COLS.split(","))},
       {", ".join("i." + c.strip() for c in INPUT_COLS.split(","))}, t.state
FROM threads t
LEFT JOIN LATERAL (
    SELECT {", ".join("y." + c.strip() for c in INPUT_COLS.split(","))}
    FROM (
        SELECT x.id, row_number() OVER w AS n, sum(octet_length(x.content)) OVER w AS upto
        FROM inputs x
        WHERE x.thread_id = t.id AND x.not_before <= %(now)s
          AND (t.awaiting = 0 OR x.kind = 'tool_result')
        WINDOW w AS (ORDER BY x.id)
        ORDER BY x.id
        LIMIT %(limit)s
    ) b
    JOIN inputs y ON y.id = b.id
    WHERE b.n = 1 OR b.upto <= %(bytes)s
) i ON true
WHERE t.id = %(id)s
ORDER BY i.id
"""
# Counts made on read, written back where the messages are still uncounted.
STORE_COUNTS = (
    "UPDATE messages m SET tokens = c.tokens "
    "FROM unnest(%s::text[], %s::bigint[], %s::bigint[]) AS c(thread_id, seq, tokens) "
    "WHERE m.thread_id = c.thread_id AND m.seq = c.seq AND COALESCE(m.tokens, 0) = 0"
)
# A view never holds reasoning (the model is not shown it again; it would escape the
# view's byte bound): NULL in its place.
VIEW_MESSAGE_COLS = MESSAGE_COLS.replace("reasoning", "NULL")
NEWEST_MESSAGES = (
    f"SELECT {VIEW_MESSAGE_COLS} FROM messages WHERE thread_id = %s AND seq <= %s AND seq > %s "
    "ORDER BY seq DESC LIMIT %s"
)
SUMMARY_AT = f"SELECT {SUMMARY_COLS} FROM summaries WHERE thread_id = %s AND upto_seq = %s"
# The latest summary a child spawned at parent_seq inherited from that parent.
SUMMARY_INHERITED = (
    f"SELECT {SUMMARY_COLS} FROM summaries WHERE thread_id = %s AND made_at_seq <= %s "
    "ORDER BY upto_seq DESC LIMIT 1"
)
PARENT_OF = "SELECT parent_id, parent_seq FROM threads WHERE id = %s"
HAS_WORK = """
SELECT EXISTS (SELECT 1 FROM threads WHERE ready_key IS NOT NULL AND ready_at <= %(now)s
                 AND (%(agents)s::text[] IS NULL OR agent = ANY (%(agents)s::text[])))
    OR EXISTS (SELECT 1 FROM threads WHERE lease_token IS NOT NULL)
    OR EXISTS (SELECT 1 FROM outbox WHERE status IN ('pending', 'running'))
"""
TABLE_BYTES = """
SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
  AND c.relname IN ('threads', 'inputs', 'input_keys', 'messages', 'outbox', 'schema_version',
                    'summaries', 'blobs', 'blob_chunks', 'blob_refs', 'workers',
                    'state_journal', 'state_parts')
"""

# -- schema ---------------------------------------------------------------------------
CURRENT_SCHEMA = "SELECT current_schema()"
# several processes may open a new database at once: one creates it
SCHEMA_LOCK = "SELECT pg_advisory_xact_lock(hashtext('dormant-schema:' || %s::text))"
SCHEMA_EXISTS = "SELECT to_regclass(format('%I.schema_version', current_schema()))"
SCHEMA_VERSION = "SELECT version FROM schema_version"
SET_FIRST_VERSION = "INSERT INTO schema_version (version) VALUES (%s)"
SET_VERSION = "UPDATE schema_version SET version = %s"

# -- the database clock and worker heartbeats (backend.DbClock, backend.Heartbeat) ------
DB_NOW = "SELECT extract(epoch FROM clock_timestamp())::float8"
HEARTBEAT = """
INSERT INTO workers AS w (id, host, pid, started_at, heartbeat_at)
SELECT id, %s, %s, now(), now() FROM unnest(%s::text[]) AS ids (id)
ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, heartbeat_at = now()
"""
FORGET_WORKERS = "DELETE FROM workers WHERE heartbeat_at < now() - interval '1 hour'"

# -- connections and the writer -------------------------------------------------------
LISTEN = "LISTEN {channel}"  # a name from writer.channels() ([a-z0-9_]), never user input
NOTIFY = "pg_notify('{channel}', '{instance}')"  # joined into one SELECT per batch
SET_LOCK_TIMEOUT = "SET lock_timeout = {ms:d}"
SET_LOCAL_LOCK_TIMEOUT = "SET LOCAL lock_timeout = {ms:d}"
BEGIN, COMMIT, ROLLBACK = "BEGIN", "COMMIT", "ROLLBACK"
SAVEPOINT, ROLLBACK_TO_SAVEPOINT, RELEASE_SAVEPOINT = (
    "SAVEPOINT job",
    "ROLLBACK TO SAVEPOINT job",
    "RELEASE SAVEPOINT job",
)

# -- reads ----------------------------------------------------------------------------
GET_THREAD = f"SELECT {THREAD_COLS} FROM threads WHERE id = %s"
THREAD_EXISTS = "SELECT 1 FROM threads WHERE id = %s"
#: Bytes of the parts a thread's pending inputs and messages took since a time.
PART_BYTES_SINCE = """SELECT coalesce(sum((p ->> 'size')::bigint), 0)::bigint FROM (
    SELECT parts FROM inputs WHERE thread_id = %(t)s AND parts IS NOT NULL AND admitted_at >= %(since)s
    UNION ALL SELECT parts FROM messages
    WHERE thread_id = %(t)s AND parts IS NOT NULL AND created_at >= %(since)s
) AS x, jsonb_array_elements(x.parts::jsonb) AS p"""
HISTORY_NEWEST_FIRST = (
    f"SELECT {MESSAGE_COLS} FROM messages WHERE thread_id = %s AND seq < %s ORDER BY seq DESC LIMIT %s"
)
HISTORY_OLDEST_FIRST = (
    f"SELECT {MESSAGE_COLS} FROM messages WHERE thread_id = %s AND seq > %s ORDER BY seq LIMIT %s"
)
LIST_THREADS = f"SELECT {THREAD_COLS} FROM threads WHERE id > %s ORDER BY id LIMIT %s"
RESOLVE_CALL = f"DELETE FROM outbox WHERE id = %s AND status IN ('dead', 'unknown') RETURNING {OUTBOX_COLS}"
LIST_OUTBOX = (
    f"SELECT {OUTBOX_COLS} FROM outbox "
    "WHERE id > %s AND (%s::text IS NULL OR status = %s::text) ORDER BY id LIMIT %s"
)
STATUS_THREADS = "SELECT status, count(*) FROM threads GROUP BY status"
STATUS_READY = "SELECT count(*) FROM threads WHERE ready_key IS NOT NULL AND ready_at <= %s"
STATUS_LEASED = "SELECT count(*) FROM threads WHERE lease_token IS NOT NULL"
STATUS_READY_BY_AGENT = """
SELECT agent, count(*) AS n FROM threads
WHERE ready_key IS NOT NULL AND ready_at <= %s AND lease_expires <= %s
GROUP BY agent ORDER BY n DESC, agent LIMIT %s
"""
STATUS_BACKLOG = "SELECT priority, count(*) FROM inputs GROUP BY priority"
STATUS_OUTBOX = "SELECT status, count(*) FROM outbox GROUP BY status"
STATUS_MESSAGES = "SELECT count(*) FROM messages"
STATUS_USAGE = (
    "SELECT sum(usage_prompt), sum(usage_completion), sum(usage_cached) FROM threads "
    "WHERE %(tenant)s::text IS NULL OR tenant = %(tenant)s::text"
)
# threads_waiting indexes only the waiting threads: no scan of the others
STATUS_WAITING = (
    "SELECT count(*), max(wait_until) FROM threads "
    "WHERE wait_reason IS NOT NULL AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)"
)
STATUS_WAITING_BY_REASON = """
SELECT wait_reason, count(*) AS n FROM threads
WHERE wait_reason IS NOT NULL AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
GROUP BY wait_reason ORDER BY n DESC, wait_reason LIMIT %(limit)s
"""

# -- blobs and deletion ---------------------------------------------------------------
INSERT_CHUNK = "INSERT INTO blob_chunks (ref, idx, data) VALUES (%s, %s, %b)"
INSERT_REF = "INSERT INTO blob_refs (thread_id, ref) VALUES (%s, %s) ON CONFLICT DO NOTHING"
SHARE_THREAD = "SELECT 1 FROM threads WHERE id = %s FOR KEY SHARE"
SHARE_BLOB = "SELECT 1 FROM blobs WHERE ref = %s FOR KEY SHARE"
DELETE_CHUNKS = "DELETE FROM blob_chunks WHERE ref = %s"
INSERT_BLOB = (
    "INSERT INTO blobs (ref, size, chunk_size, created_at) VALUES (%s, %s, %s, %s) "
    "ON CONFLICT (ref) DO NOTHING RETURNING 1"
)
MOVE_CHUNKS = "UPDATE blob_chunks SET ref = %s WHERE ref = %s"
SWEEP_CHUNKS = "DELETE FROM blob_chunks WHERE ref >= %s AND ref < %s"
VISIBLE_BLOB = """
WITH RECURSIVE line (id, parent_id) AS (
    SELECT id, parent_id FROM threads WHERE id = %(thread)s
    UNION ALL
    SELECT t.id, t.parent_id FROM threads t JOIN line ON t.id = line.parent_id
)
SELECT b.size, b.chunk_size FROM blobs b
WHERE b.ref = %(ref)s AND b.size >= 0
  AND EXISTS (SELECT 1 FROM line JOIN blob_refs r ON r.thread_id = line.id AND r.ref = %(ref)s)
"""
# The wanted part of each chunk of a range: the first chunk from byte %(low)s, the last one
# up to byte %(high)s. substring() of an uncompressed TOASTed value fetches only the TOAST
# rows it needs.
READ_CHUNKS = """
SELECT idx, CASE
    WHEN idx = %(first)s AND idx = %(last)s
        THEN substring(data FROM %(low)s::integer + 1 FOR %(high)s::integer - %(low)s::integer)
    WHEN idx = %(first)s THEN substring(data FROM %(low)s::integer + 1)
    WHEN idx = %(last)s THEN substring(data FROM 1 FOR %(high)s::integer)
    ELSE data END
FROM blob_chunks WHERE ref = %(ref)s AND idx >= %(first)s AND idx <= %(last)s ORDER BY idx
"""
TREE = """
WITH RECURSIVE tree (id) AS (
    SELECT id FROM threads WHERE id = %s
    UNION
    SELECT t.id FROM threads t JOIN tree ON t.parent_id = tree.id
)
SELECT id FROM tree
"""
LOCK_TREE = "SELECT 1 FROM threads WHERE id = ANY (%s) ORDER BY id FOR UPDATE"
LEASED_IN_TREE = (
    "SELECT id FROM threads WHERE id = ANY (%s) AND lease_token IS NOT NULL AND lease_expires > %s LIMIT 1"
)
DELETE_TREE_REFS = "DELETE FROM blob_refs WHERE thread_id = ANY (%s) RETURNING ref"
#: One statement per table whose rows belong to a thread (rows.THREAD_TABLES), then the threads.
DELETE_TREE_ROWS = tuple(f"DELETE FROM {table} WHERE thread_id = ANY (%s)" for table in THREAD_TABLES)
DELETE_TREE = "DELETE FROM threads WHERE id = ANY (%s)"
LOCK_BLOBS = "SELECT 1 FROM blobs WHERE ref = ANY (%s) ORDER BY ref FOR UPDATE"
DELETE_UNUSED_BLOBS = (
    "DELETE FROM blobs b WHERE b.ref = ANY (%s) "
    "AND NOT EXISTS (SELECT 1 FROM blob_refs r WHERE r.ref = b.ref) RETURNING b.ref"
)
DELETE_BLOB_CHUNKS = "DELETE FROM blob_chunks WHERE ref = ANY (%s)"

# -- the throwaway test server (embedded.py) ------------------------------------------
ALTER_SYSTEM = "ALTER SYSTEM SET {name} = '{value}'"  # names and values from embedded.NOT_DURABLE
RELOAD_CONF = "SELECT pg_reload_conf()"

# -- tenants and API keys --------------------------------------------------------------

INSERT_TENANT = (
    "INSERT INTO tenants (id, name, created_at) VALUES (%s, %s, %s::float8) "
    "ON CONFLICT DO NOTHING RETURNING id"
)
FIND_TENANT = (
    "SELECT id, name, created_at FROM tenants WHERE id = %(key)s OR name = %(key)s "
    "ORDER BY id = %(key)s DESC LIMIT 1"
)
TENANT_PAGE = "SELECT id, name, created_at FROM tenants WHERE name > %s ORDER BY name LIMIT %s"
INSERT_KEY = (
    "INSERT INTO api_keys (id, tenant_id, salt, digest, created_at) VALUES (%s, %s, %s, %s, %s::float8)"
)
# the key's row after the update: the updated one, else (already revoked, or missing)
# the row as it was (the outer SELECT sees the snapshot from before the update)
REVOKE_KEY = (
    "WITH done AS (UPDATE api_keys SET revoked_at = %(now)s::float8 "
    "WHERE id = %(id)s AND revoked_at IS NULL RETURNING id, tenant_id, created_at, revoked_at) "
    "SELECT * FROM done UNION ALL "
    "SELECT id, tenant_id, created_at, revoked_at FROM api_keys "
    "WHERE id = %(id)s AND NOT EXISTS (SELECT 1 FROM done)"
)
KEY_PAGE = (
    "SELECT id, tenant_id, created_at, revoked_at FROM api_keys WHERE tenant_id = %s AND id > %s "
    "ORDER BY id LIMIT %s"
)
LIVE_KEY = (
    "SELECT k.salt, k.digest, t.id, t.name, t.created_at FROM api_keys k "
    "JOIN tenants t ON t.id = k.tenant_id WHERE k.id = %s AND k.revoked_at IS NULL"
)

# One tenant's counts for its status (threads.tenant, children included).
TENANT_THREADS_BY_STATUS = "SELECT status, COUNT(*) FROM threads WHERE tenant = %(tenant)s GROUP BY status"
TENANT_THREADS_READY = (
    "SELECT COUNT(*) FROM threads "
    "WHERE tenant = %(tenant)s AND ready_key IS NOT NULL AND ready_at <= %(now)s::float8"
)
TENANT_THREADS_LEASED = "SELECT COUNT(*) FROM threads WHERE tenant = %(tenant)s AND lease_token IS NOT NULL"
TENANT_INPUTS_BY_PRIORITY = (
    "SELECT i.priority, COUNT(*) FROM inputs i JOIN threads t ON t.id = i.thread_id "
    "WHERE t.tenant = %(tenant)s GROUP BY i.priority"
)
TENANT_OUTBOX_BY_STATUS = (
    "SELECT o.status, COUNT(*) FROM outbox o JOIN threads t ON t.id = o.thread_id "
    "WHERE t.tenant = %(tenant)s GROUP BY o.status"
)
TENANT_MESSAGE_COUNT = (
    "SELECT COUNT(*) FROM messages m JOIN threads t ON t.id = m.thread_id WHERE t.tenant = %(tenant)s"
)
NO_BYTES = "SELECT 0"

# HISTORY_OLDEST/NEWEST_FIRST bounded by content bytes: of the first %(limit)s messages, those whose preceding
# ones hold at most %(max_bytes)s bytes, and the first two: the read ends with the first message past
# the bound, which tells the core there is more. Sizes come from octet_length: no text past
# the cut is read.
HISTORY_OLDEST_FIRST_BYTES = f"""
SELECT {MESSAGE_COLS} FROM messages WHERE thread_id = %(thread)s AND seq IN (
    SELECT seq FROM (
        SELECT seq, sum(size) OVER (ORDER BY seq) - size AS upto, row_number() OVER (ORDER BY seq) AS n FROM (
            SELECT seq, octet_length(content) + coalesce(octet_length(reasoning), 0) AS size FROM messages
            WHERE thread_id = %(thread)s AND seq > %(after)s ORDER BY seq LIMIT %(limit)s) a) b
    WHERE upto <= %(max_bytes)s OR n <= 2)
ORDER BY seq
"""
HISTORY_NEWEST_FIRST_BYTES = f"""
SELECT {MESSAGE_COLS} FROM messages WHERE thread_id = %(thread)s AND seq IN (
    SELECT seq FROM (
        SELECT seq, sum(size) OVER (ORDER BY seq DESC) - size AS upto,
               row_number() OVER (ORDER BY seq DESC) AS n FROM (
            SELECT seq, octet_length(content) + coalesce(octet_length(reasoning), 0) AS size FROM messages
            WHERE thread_id = %(thread)s AND seq < %(after)s ORDER BY seq DESC LIMIT %(limit)s) a) b
    WHERE upto <= %(max_bytes)s OR n <= 2)
ORDER BY seq DESC
"""

# -- the state journal; change records are written by dormant_commit_slice
THREAD_RUNS = "SELECT runs FROM threads WHERE id = %s"
# a tenant's active threads of one subject but one, most recently updated first (threads_subject)
SUBJECT_THREADS = """
SELECT id FROM threads WHERE subject = %s AND tenant = %s AND id <> %s AND status = 'active'
ORDER BY updated_at DESC, id LIMIT %s
"""
# A checkpoint header, not recoverable yet, numbered after the journal's newest (the
# writer locked the thread row first).
BEGIN_CHECKPOINT = f"""
INSERT INTO state_journal (thread_id, seq, kind, run, upto, parts, size, digest, created_at, msg_seq)
SELECT t.id, (SELECT coalesce(max(j.seq), 0) + 1 FROM state_journal j WHERE j.thread_id = t.id),
       %(kind)s, t.runs, %(upto)s, %(parts)s, %(size)s, %(digest)s, %(now)s, %(msg_seq)s
FROM threads t WHERE t.id = %(id)s
RETURNING {JOURNAL_COLS}
"""
INSERT_PARTS = """
INSERT INTO state_parts (thread_id, seq, idx, data)
SELECT %s, %s, %s + p.n - 1, p.data FROM unnest(%s::text[]) WITH ORDINALITY AS p (data, n)
"""
MARK_RECOVERABLE = """
UPDATE state_journal SET recoverable = true
WHERE thread_id = %(id)s AND seq = %(seq)s AND kind IN ('full', 'incremental')
  AND parts = (SELECT count(*) FROM state_parts WHERE thread_id = %(id)s AND seq = %(seq)s)
"""
JOURNAL_PAGE = (
    f"SELECT {JOURNAL_COLS} FROM state_journal WHERE thread_id = %s AND seq > %s ORDER BY seq LIMIT %s"
)
NEWEST_CHECKPOINT = f"""
SELECT {JOURNAL_COLS} FROM state_journal
WHERE thread_id = %s AND kind = %s AND recoverable ORDER BY seq DESC LIMIT 1
"""
CHECKPOINTS_AFTER = f"""
SELECT {JOURNAL_COLS} FROM state_journal
WHERE thread_id = %s AND kind IN ('full', 'incremental') AND recoverable AND seq > %s
ORDER BY seq LIMIT %s
"""
PARTS_PAGE = (
    "SELECT data FROM state_parts WHERE thread_id = %s AND seq = %s AND idx >= %s ORDER BY idx LIMIT %s"
)

# -- retention tiers; see the SQLite statements of the same names ---------
SHRINK_PICK = """
SELECT m.seq,
       CASE WHEN left(m.content, %(plen)s) = %(line)s THEN substr(m.content, %(plen)s + 1, %(rlen)s) END
FROM messages m
WHERE m.thread_id = %(id)s AND m.role = 'tool' AND length(m.content) > %(head)s + length(%(note)s)
  AND m.seq < coalesce((SELECT k.seq FROM messages k WHERE k.thread_id = %(id)s AND k.role = 'tool'
                        ORDER BY k.seq DESC LIMIT 1 OFFSET %(keep)s - 1), 0)
ORDER BY m.seq LIMIT %(limit)s
FOR UPDATE OF m
"""
SHRINK_SEQS = """
UPDATE messages SET content = left(content, %(head)s) || %(note)s, tokens = NULL
WHERE thread_id = %(id)s AND seq = ANY (%(seqs)s)
"""
REF_SHOWN = """
SELECT 1 FROM messages
WHERE thread_id = %(id)s AND role = 'tool' AND left(content, length(%(shown)s)) = %(shown)s
  AND right(content, length(%(note)s)) <> %(note)s LIMIT 1
"""
DROP_REF = "DELETE FROM blob_refs WHERE thread_id = %s AND ref = %s"
HISTORY_BOUND = """
WITH w AS (
  SELECT coalesce((SELECT k.seq FROM messages k WHERE k.thread_id = %(id)s AND k.role = 'tool'
                   ORDER BY k.seq DESC LIMIT 1 OFFSET %(tools)s - 1),
                  (SELECT min(k.seq) FROM messages k WHERE k.thread_id = %(id)s AND k.role = 'tool')) AS seq)
SELECT least(t.summary_seq + 1,
             coalesce((SELECT m.seq FROM messages m WHERE m.thread_id = t.id AND m.role = 'user'
                       ORDER BY m.seq DESC LIMIT 1 OFFSET %(runs)s - 1), 0),
             CASE WHEN w.seq IS NULL THEN t.summary_seq + 1
                  ELSE coalesce((SELECT max(u.seq) FROM messages u
                                 WHERE u.thread_id = t.id AND u.role = 'user' AND u.seq <= w.seq), 0) END),
       (SELECT min(m.seq) FROM messages m WHERE m.thread_id = t.id)
FROM threads t, w WHERE t.id = %(id)s AND NOT EXISTS (SELECT 1 FROM threads c WHERE c.parent_id = t.id)
"""
RUN_STARTS = """
SELECT min(seq), max(seq) FROM messages WHERE thread_id = %s AND role = 'user' AND seq > %s AND seq <= %s
"""
HISTORY_REFS = """
SELECT DISTINCT substr(content, %(plen)s + 1, %(rlen)s) FROM messages
WHERE thread_id = %(id)s AND seq < %(cut)s AND role = 'tool' AND left(content, %(plen)s) = %(line)s
"""
DROP_HISTORY = "DELETE FROM messages WHERE thread_id = %s AND seq < %s"
# the thread's retention mark: more messages deleted, every one up to a seq, under a policy
MARK_PRUNED = """
INSERT INTO retention_marks AS m (thread_id, pruned, up_to_seq, policy, pruned_at)
VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (thread_id) DO UPDATE SET pruned = m.pruned + excluded.pruned,
  up_to_seq = greatest(m.up_to_seq, excluded.up_to_seq), policy = excluded.policy,
  pruned_at = excluded.pruned_at
"""
RETENTION_MARK = "SELECT pruned, up_to_seq, policy, pruned_at FROM retention_marks WHERE thread_id = %s"
PRUNE_KEYS = """
DELETE FROM input_keys WHERE (thread_id, dedup_key) IN (
  SELECT k.thread_id, k.dedup_key FROM input_keys k
  WHERE k.admitted_at < %(before)s
    AND NOT EXISTS (SELECT 1 FROM inputs i WHERE i.id = k.input_id)
    AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.thread_id = k.thread_id AND o.call_id = k.dedup_key)
  ORDER BY k.admitted_at LIMIT %(limit)s
  FOR UPDATE OF k SKIP LOCKED)
"""
# Summaries no view, child or fork at a stored seq can read (see the SQLite twin).
PRUNE_SUMMARIES = """
WITH s AS (
  SELECT upto_seq, made_at_seq, lead(made_at_seq) OVER (ORDER BY upto_seq) AS next_made,
         row_number() OVER (ORDER BY upto_seq DESC) AS newer
  FROM summaries WHERE thread_id = %(id)s)
DELETE FROM summaries WHERE thread_id = %(id)s AND upto_seq IN (
  SELECT s.upto_seq FROM s, threads t
  WHERE t.id = %(id)s AND s.newer > %(keep)s AND s.upto_seq < t.summary_seq
    AND s.next_made <= coalesce((SELECT min(m.seq) FROM messages m WHERE m.thread_id = %(id)s), t.last_seq)
    AND NOT EXISTS (SELECT 1 FROM threads c WHERE c.parent_id = %(id)s
                    AND c.parent_seq >= s.made_at_seq AND c.parent_seq < s.next_made)
  ORDER BY s.upto_seq LIMIT %(limit)s)
"""
DROP_SUPERSEDED = """
DELETE FROM state_journal WHERE thread_id = %(id)s AND seq IN (
  SELECT j.seq FROM state_journal j
  WHERE j.thread_id = %(id)s AND j.key IS NOT NULL AND j.run <= %(run)s
    AND EXISTS (SELECT 1 FROM state_journal l WHERE l.thread_id = %(id)s AND l.key = j.key
                AND l.seq > j.seq AND l.run = j.run)
  ORDER BY j.seq LIMIT %(limit)s)
"""
LAST_CHANGE_OF_RUN = (
    "SELECT max(seq) FROM state_journal WHERE thread_id = %s AND key IS NOT NULL AND run <= %s"
)
FULL_UPTO = f"""
SELECT {JOURNAL_COLS} FROM state_journal
WHERE thread_id = %s AND kind = 'full' AND recoverable AND upto <= %s ORDER BY seq DESC LIMIT 1
"""
FOLD_ROWS = """
WITH gone AS (
  DELETE FROM state_journal WHERE thread_id = %(id)s AND seq IN (
    SELECT seq FROM state_journal WHERE thread_id = %(id)s
      AND ((key IS NOT NULL AND seq <= %(upto)s) OR (key IS NULL AND seq < %(before)s))
    ORDER BY seq LIMIT %(limit)s)
  RETURNING seq),
pieces AS (
  DELETE FROM state_parts p WHERE p.thread_id = %(id)s AND p.seq < %(before)s
    AND (p.seq IN (SELECT seq FROM gone)
         OR NOT EXISTS (SELECT 1 FROM state_journal j WHERE j.thread_id = %(id)s AND j.seq = p.seq))
  RETURNING 1)
SELECT (SELECT count(*) FROM gone) + (SELECT count(*) FROM pieces)
"""
JOURNAL_SEQ_AT = """
SELECT coalesce(max(seq), 0) FROM state_journal WHERE thread_id = %s AND key IS NOT NULL AND msg_seq <= %s
"""
# The new thread `t` (inserted by the statement's first CTE, with its state and subject on
# its row: rows.state_row) with its state journaled as `add` records, and its row; no row
# when the id existed already.
_WITH_STATE = f"""
j AS (
  INSERT INTO state_journal (thread_id, seq, kind, key, value, run, created_at, msg_seq)
  SELECT t.id, e.n, 'add', e.k, e.v, 0, %(now)s, 0
  FROM t, unnest(%(keys)s::text[], %(values)s::text[]) WITH ORDINALITY AS e (k, v, n))
SELECT {THREAD_COLS} FROM t
"""
# A new thread with its first state journaled.
CREATE_THREAD_STATE = f"""
WITH t AS (
  INSERT INTO threads (id, agent, created_at, updated_at, state, subject)
  VALUES (%(id)s, %(agent)s, %(now)s, %(now)s, %(state)s, %(subject)s)
  ON CONFLICT (id) DO NOTHING
  RETURNING *),{_WITH_STATE}"""
FORK_THREAD = f"""
WITH t AS (
  INSERT INTO threads (id, agent, parent_id, parent_seq, created_at, updated_at, state, subject)
  SELECT %(new)s, s.agent, s.id, %(at)s, %(now)s, %(now)s, %(state)s, %(subject)s
  FROM threads s WHERE s.id = %(src)s
  ON CONFLICT (id) DO NOTHING
  RETURNING *),{_WITH_STATE}"""
TIER_SIZES = (
    """
SELECT coalesce(sum(octet_length(content))
                FILTER (WHERE role = 'tool' AND right(content, length(%(note)s)) <> %(note)s), 0),
       coalesce(sum(octet_length(content))
                FILTER (WHERE role = 'tool' AND right(content, length(%(note)s)) = %(note)s), 0),
       coalesce(sum(octet_length(content)) FILTER (WHERE role <> 'tool'), 0),
"""
    + TIER_SIZES_TAIL
)
LAST_CHECKPOINT = """
SELECT created_at, size FROM state_journal
WHERE kind IN ('full', 'incremental') AND recoverable ORDER BY created_at DESC LIMIT 1
"""
_NEWEST_FULL = """
SELECT max(g.seq) FROM state_journal g WHERE g.thread_id = {t}.thread_id AND g.kind = 'full' AND g.recoverable
"""
RECOVERY_READS = f"""
SELECT
  (SELECT coalesce(sum(f.size), 0) FROM state_journal f
   WHERE f.kind = 'full' AND f.recoverable AND f.seq = ({_NEWEST_FULL.format(t="f")})),
  (SELECT coalesce(sum(i.size), 0) FROM state_journal i
   WHERE i.kind = 'incremental' AND i.recoverable AND i.seq > coalesce(({_NEWEST_FULL.format(t="i")}), 0)),
  (SELECT count(*) FROM state_journal c WHERE c.key IS NOT NULL
   AND c.seq > coalesce((SELECT max(g.upto) FROM state_journal g WHERE g.thread_id = c.thread_id
                         AND g.kind IN ('full', 'incremental') AND g.recoverable), 0))
"""
OLDEST_READY = """
SELECT min(i.admitted_at) FROM inputs i JOIN threads t ON t.id = i.thread_id
WHERE t.status = 'active' AND i.not_before <= %s AND (t.awaiting = 0 OR i.kind = 'tool_result')
"""
