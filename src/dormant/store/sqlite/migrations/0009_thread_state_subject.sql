-- schema 8 -> 9: the thread row carries its journal state and subject (issue 16). A slice
-- reads its registers with its load instead of replaying the journal; a subject's other
-- threads are found by an index (state-change fan-out). Threads that have journal rows
-- start with NULL (unknown: replayed) until their next commit writes the state; their
-- subject is the newest `_subject` change record, when the journal still holds one.
ALTER TABLE threads ADD COLUMN state TEXT DEFAULT '{}';
ALTER TABLE threads ADD COLUMN subject TEXT;
UPDATE threads SET state = NULL WHERE id IN (SELECT thread_id FROM state_journal);
CREATE INDEX threads_subject ON threads (subject, tenant) WHERE subject IS NOT NULL;
UPDATE threads SET subject = (
    SELECT json_extract(j.value, '$') FROM state_journal j
    WHERE j.thread_id = threads.id AND j.key = '_subject' AND j.kind IN ('add', 'update')
    ORDER BY j.seq DESC LIMIT 1)
WHERE id IN (SELECT thread_id FROM state_journal WHERE key = '_subject');
