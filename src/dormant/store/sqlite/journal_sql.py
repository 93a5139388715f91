"""The SQL of the state journal (checkpoints, recovery) and of the retention tiers, by
name: the SQLite backend's statements for :mod:`dormant.store.journal` and
:mod:`dormant.retention.policy` (the rest are in :mod:`.sql`)."""

from __future__ import annotations

from ..rows import JOURNAL_COLS, TIER_SIZES_TAIL

# -- the state journal --------------------------------------------------
JOURNAL_TOP = "SELECT coalesce(max(seq), 0) FROM state_journal WHERE thread_id = ?"
THREAD_RUNS = "SELECT runs FROM threads WHERE id = ?"
# a tenant's active threads of one subject but one, most recently updated first (threads_subject)
SUBJECT_THREADS = """
SELECT id FROM threads WHERE subject = ? AND tenant = ? AND id <> ? AND status = 'active'
ORDER BY updated_at DESC, id LIMIT ?
"""
THREAD_RUNS_SEQ = "SELECT runs, last_seq FROM threads WHERE id = ?"
INSERT_CHANGE = """
INSERT INTO state_journal (thread_id, seq, kind, key, value, run, created_at, msg_seq)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
"""
# A checkpoint header, not recoverable yet: its seq follows the journal's newest.
INSERT_CHECKPOINT = f"""
INSERT INTO state_journal (thread_id, seq, kind, run, upto, parts, size, digest, created_at, msg_seq)
SELECT ?1, coalesce(max(seq), 0) + 1, ?2, (SELECT runs FROM threads WHERE id = ?1), ?3, ?4, ?5, ?6, ?7, ?8
FROM state_journal WHERE thread_id = ?1
RETURNING {JOURNAL_COLS}
"""
INSERT_PART = "INSERT INTO state_parts (thread_id, seq, idx, data) VALUES (?, ?, ?, ?)"
# Recoverable only when every part is there (the core verified their digest).
MARK_RECOVERABLE = """
UPDATE state_journal SET recoverable = 1
WHERE thread_id = ?1 AND seq = ?2 AND kind IN ('full', 'incremental')
  AND parts = (SELECT count(*) FROM state_parts WHERE thread_id = ?1 AND seq = ?2)
"""
JOURNAL_PAGE = f"""
SELECT {JOURNAL_COLS} FROM state_journal WHERE thread_id = ? AND seq > ? ORDER BY seq LIMIT ?
"""
NEWEST_CHECKPOINT = f"""
SELECT {JOURNAL_COLS} FROM state_journal
WHERE thread_id = ? AND kind = ? AND recoverable = 1 ORDER BY seq DESC LIMIT 1
"""
PARTS_PAGE = "SELECT data FROM state_parts WHERE thread_id = ? AND seq = ? AND idx >= ? ORDER BY idx LIMIT ?"
CHECKPOINTS_AFTER = f"""
SELECT {JOURNAL_COLS} FROM state_journal
WHERE thread_id = ? AND kind IN ('full', 'incremental') AND recoverable = 1 AND seq > ?
ORDER BY seq LIMIT ?
"""

# -- retention tiers; see dormant.retention.policy ---------------------------------
# Tool results older than the thread's newest ?2, longer than ?3 characters plus the note
# ?4, oldest first, at most ?5: their ids and, for a blob's excerpt (its first ?6
# characters are ?7, the line dormant.tools.blobs.excerpt starts with), the ?8-character ref.
SHRINK_PICK = """
SELECT m.id, CASE WHEN substr(m.content, 1, ?6) = ?7 THEN substr(m.content, ?6 + 1, ?8) END
FROM messages m
WHERE m.thread_id = ?1 AND m.role = 'tool' AND length(m.content) > ?3 + length(?4)
  AND m.seq < coalesce((SELECT k.seq FROM messages k WHERE k.thread_id = ?1 AND k.role = 'tool'
                        ORDER BY k.seq DESC LIMIT 1 OFFSET ?2 - 1), 0)
ORDER BY m.seq LIMIT ?5
"""
SHRINK_ONE = "UPDATE message_rows SET content = substr(content, 1, ?1) || ?2, tokens = NULL WHERE id = ?3"
# a tool result of thread ?1 starting with ?2 (the blob line and ref) that is not cut (?3: the note)
REF_SHOWN = """
SELECT 1 FROM messages WHERE thread_id = ?1 AND role = 'tool' AND substr(content, 1, length(?2)) = ?2
  AND substr(content, -length(?3)) <> ?3 LIMIT 1
"""
DROP_REF = "DELETE FROM blob_refs WHERE thread_id = ? AND ref = ?"
# Where thread ?1's history may be cut: before its ?2-th newest user message (a run
# starts there, with no call open), before the run of its oldest whole tool result
# (the ?3-th newest, or the oldest if fewer) and after what its summary covers; and its
# oldest message. No row when it has children (their views read its history).
HISTORY_BOUND = """
WITH w AS (
  SELECT coalesce((SELECT k.seq FROM messages k WHERE k.thread_id = ?1 AND k.role = 'tool'
                   ORDER BY k.seq DESC LIMIT 1 OFFSET ?3 - 1),
                  (SELECT min(k.seq) FROM messages k WHERE k.thread_id = ?1 AND k.role = 'tool')) AS seq)
SELECT min(t.summary_seq + 1,
           coalesce((SELECT m.seq FROM messages m WHERE m.thread_id = ?1 AND m.role = 'user'
                     ORDER BY m.seq DESC LIMIT 1 OFFSET ?2 - 1), 0),
           CASE WHEN w.seq IS NULL THEN t.summary_seq + 1
                ELSE coalesce((SELECT max(u.seq) FROM messages u
                               WHERE u.thread_id = ?1 AND u.role = 'user' AND u.seq <= w.seq), 0) END),
       (SELECT min(m.seq) FROM messages m WHERE m.thread_id = ?1)
FROM threads t, w WHERE t.id = ?1 AND NOT EXISTS (SELECT 1 FROM threads c WHERE c.parent_id = ?1)
"""
RUN_STARTS = (
    "SELECT min(seq), max(seq) FROM messages WHERE thread_id = ? AND role = 'user' AND seq > ? AND seq <= ?"
)
# the blobs tool results before seq ?2 show (?3: the blob line's length, ?4 the ref's, ?5 the line)
HISTORY_REFS = """
SELECT DISTINCT substr(content, ?3 + 1, ?4) FROM messages
WHERE thread_id = ?1 AND seq < ?2 AND role = 'tool' AND substr(content, 1, ?3) = ?5
"""
DROP_HISTORY = (
    "DELETE FROM message_rows WHERE thread_rid = (SELECT rid FROM threads WHERE id = ?) AND seq < ?"
)
# the thread's retention mark: ?2 more messages deleted, every one up to seq ?3, under ?4
MARK_PRUNED = """
INSERT INTO retention_marks (thread_id, pruned, up_to_seq, policy, pruned_at) VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (thread_id) DO UPDATE SET pruned = pruned + excluded.pruned,
  up_to_seq = max(up_to_seq, excluded.up_to_seq), policy = excluded.policy, pruned_at = excluded.pruned_at
"""
RETENTION_MARK = "SELECT pruned, up_to_seq, policy, pruned_at FROM retention_marks WHERE thread_id = ?"
# Dedup keys are forgotten by walking the primary key, a window at a time (no index on
# admitted_at: it took as many bytes per key as the key itself). KEYS_WINDOW_END: the last
# key of the window of ?3 keys after (?1, ?2) (NULL ?1: from the first key); none: the
# window reaches the end of the table.
KEYS_WINDOW_END = """
SELECT thread_id, dedup_key FROM input_keys
WHERE ?1 IS NULL OR (thread_id, dedup_key) > (?1, ?2)
ORDER BY thread_id, dedup_key LIMIT 1 OFFSET ?3 - 1
"""
# the window's keys (after (?1, ?2), up to (?3, ?4); NULL: no bound) admitted before ?5
# whose input was consumed and that no outbox entry names, the first ?6 of them
PRUNE_KEYS = """
DELETE FROM input_keys WHERE (thread_id, dedup_key) IN (
  SELECT k.thread_id, k.dedup_key FROM input_keys k
  WHERE (?1 IS NULL OR (k.thread_id, k.dedup_key) > (?1, ?2))
    AND (?3 IS NULL OR (k.thread_id, k.dedup_key) <= (?3, ?4))
    AND k.admitted_at < ?5
    AND NOT EXISTS (SELECT 1 FROM inputs i WHERE i.id = k.input_id)
    AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.thread_id = k.thread_id AND o.call_id = k.dedup_key)
  ORDER BY k.thread_id, k.dedup_key LIMIT ?6)
RETURNING thread_id, dedup_key
"""
# Summaries of thread ?1 that nothing can read any more, the oldest ?3: all but its ?2
# newest (and never the one its views start from), whose successor was made at or
# before its oldest stored message (so a fork at any stored seq inherits a newer one),
# and that no child inherits (spawned at or after it was made, before its successor was).
PRUNE_SUMMARIES = """
WITH s AS (
  SELECT upto_seq, made_at_seq, lead(made_at_seq) OVER (ORDER BY upto_seq) AS next_made,
         row_number() OVER (ORDER BY upto_seq DESC) AS newer
  FROM summaries WHERE thread_id = ?1)
DELETE FROM summaries WHERE thread_id = ?1 AND upto_seq IN (
  SELECT s.upto_seq FROM s, threads t
  WHERE t.id = ?1 AND s.newer > ?2 AND s.upto_seq < t.summary_seq
    AND s.next_made <= coalesce((SELECT min(m.seq) FROM messages m WHERE m.thread_id = ?1), t.last_seq)
    AND NOT EXISTS (SELECT 1 FROM threads c WHERE c.parent_id = ?1
                    AND c.parent_seq >= s.made_at_seq AND c.parent_seq < s.next_made)
  ORDER BY s.upto_seq LIMIT ?3)
"""
# change records of runs <= ?2 that a later change of the same key in the same run supersedes
DROP_SUPERSEDED = """
DELETE FROM state_journal WHERE thread_id = ?1 AND seq IN (
  SELECT j.seq FROM state_journal j
  WHERE j.thread_id = ?1 AND j.key IS NOT NULL AND j.run <= ?2
    AND EXISTS (SELECT 1 FROM state_journal l WHERE l.thread_id = ?1 AND l.key = j.key
                AND l.seq > j.seq AND l.run = j.run)
  ORDER BY j.seq LIMIT ?3)
"""
LAST_CHANGE_OF_RUN = "SELECT max(seq) FROM state_journal WHERE thread_id = ? AND key IS NOT NULL AND run <= ?"
FULL_UPTO = f"""
SELECT {JOURNAL_COLS} FROM state_journal
WHERE thread_id = ? AND kind = 'full' AND recoverable = 1 AND upto <= ? ORDER BY seq DESC LIMIT 1
"""
# fold: change records up to ?2 and checkpoint headers before ?3 (at most ?4 rows), then
# the body pieces whose header is gone
FOLD_ROWS = """
DELETE FROM state_journal WHERE thread_id = ?1 AND seq IN (
  SELECT seq FROM state_journal WHERE thread_id = ?1
    AND ((key IS NOT NULL AND seq <= ?2) OR (key IS NULL AND seq < ?3))
  ORDER BY seq LIMIT ?4)
"""
FOLD_PARTS = """
DELETE FROM state_parts WHERE thread_id = ?1 AND seq < ?2
  AND NOT EXISTS (SELECT 1 FROM state_journal j WHERE j.thread_id = ?1 AND j.seq = state_parts.seq)
"""
JOURNAL_SEQ_AT = (
    "SELECT coalesce(max(seq), 0) FROM state_journal WHERE thread_id = ? AND key IS NOT NULL AND msg_seq <= ?"
)
THREAD_AGENT = "SELECT agent FROM threads WHERE id = ?"
# bytes per tier (?1: the note a cut tool result ends with)
TIER_SIZES = (
    """
SELECT coalesce(sum(CASE WHEN role = 'tool' AND substr(content, -length(?1)) <> ?1
                         THEN octet_length(content) END), 0),
       coalesce(sum(CASE WHEN role = 'tool' AND substr(content, -length(?1)) = ?1
                         THEN octet_length(content) END), 0),
       coalesce(sum(CASE WHEN role <> 'tool' THEN octet_length(content) END), 0),
"""
    + TIER_SIZES_TAIL
)
# the newest recoverable checkpoint's time and size; then recovery's reads: the newest
# full checkpoint of each thread, the increments after it, the change records after
# the newest checkpoint
LAST_CHECKPOINT = """
SELECT created_at, size FROM state_journal
WHERE kind IN ('full', 'incremental') AND recoverable = 1 ORDER BY created_at DESC LIMIT 1
"""
_NEWEST_FULL = (
    "SELECT max(g.seq) FROM state_journal g WHERE g.thread_id = {t}.thread_id "
    "AND g.kind = 'full' AND g.recoverable = 1"
)
RECOVERY_READS = f"""
SELECT
  (SELECT coalesce(sum(f.size), 0) FROM state_journal f
   WHERE f.kind = 'full' AND f.recoverable = 1 AND f.seq = ({_NEWEST_FULL.format(t="f")})),
  (SELECT coalesce(sum(i.size), 0) FROM state_journal i
   WHERE i.kind = 'incremental' AND i.recoverable = 1
     AND i.seq > coalesce(({_NEWEST_FULL.format(t="i")}), 0)),
  (SELECT count(*) FROM state_journal c WHERE c.key IS NOT NULL
   AND c.seq > coalesce((SELECT max(g.upto) FROM state_journal g WHERE g.thread_id = c.thread_id
                         AND g.kind IN ('full', 'incremental') AND g.recoverable = 1), 0))
"""
# Messages of thread ?1 older than the one holding its ?2-th newest part (image or file)
# that still have a part with a blob reference, the oldest ?3: their ids and those refs.
PARTS_PICK = """
WITH c AS (
  SELECT seq, sum(json_array_length(parts)) OVER (ORDER BY seq DESC) AS n
  FROM messages WHERE thread_id = ?1 AND parts IS NOT NULL)
SELECT m.id, (SELECT json_group_array(json_extract(p.value, '$.ref')) FROM json_each(m.parts) p
              WHERE coalesce(json_extract(p.value, '$.ref'), '') <> '')
FROM messages m
WHERE m.thread_id = ?1 AND m.parts IS NOT NULL
  AND m.seq < coalesce((SELECT max(seq) FROM c WHERE n >= ?2), 0)
  AND EXISTS (SELECT 1 FROM json_each(m.parts) p WHERE coalesce(json_extract(p.value, '$.ref'), '') <> '')
ORDER BY m.seq LIMIT ?3
"""
# message ?1's parts without their blob references (facts and text kept), its count cleared
PARTS_DEMOTE = """
UPDATE message_rows SET tokens = NULL,
  parts = (SELECT json_group_array(json(json_remove(p.value, '$.ref'))) FROM json_each(message_rows.parts) p)
WHERE id = ?1
"""
# a message or an input of thread ?1 with a part referring to blob ?2
REF_IN_PARTS = """
SELECT 1 FROM messages m, json_each(m.parts) p
WHERE m.thread_id = ?1 AND m.parts IS NOT NULL AND instr(m.parts, ?2) AND json_extract(p.value, '$.ref') = ?2
UNION ALL
SELECT 1 FROM inputs i, json_each(i.parts) p
WHERE i.thread_id = ?1 AND i.parts IS NOT NULL AND instr(i.parts, ?2) AND json_extract(p.value, '$.ref') = ?2
LIMIT 1
"""
# the blobs the parts of thread ?1's messages before seq ?2 refer to
HISTORY_PART_REFS = """
SELECT DISTINCT json_extract(p.value, '$.ref') FROM messages m, json_each(m.parts) p
WHERE m.thread_id = ?1 AND m.seq < ?2 AND m.parts IS NOT NULL
  AND coalesce(json_extract(p.value, '$.ref'), '') <> ''
"""
