"""PostgreSQL statements of retention over content parts: which old messages' images and
files go to their facts and text, that change, and what still refers to a blob (the
``parts`` columns hold JSON text; read here as ``jsonb``)."""

from __future__ import annotations

# Messages of a thread older than the one holding its keep-th newest part (image or
# file) that still have a part with a blob reference, the oldest ``limit``: their seqs
# and those refs (rows locked).
PARTS_PICK = """
WITH c AS (
  SELECT seq, sum(jsonb_array_length(parts::jsonb)) OVER (ORDER BY seq DESC) AS n
  FROM messages WHERE thread_id = %(id)s AND parts IS NOT NULL)
SELECT m.seq,
       ARRAY(SELECT p ->> 'ref' FROM jsonb_array_elements(m.parts::jsonb) p
             WHERE coalesce(p ->> 'ref', '') <> '')
FROM messages m
WHERE m.thread_id = %(id)s AND m.parts IS NOT NULL
  AND m.seq < coalesce((SELECT max(seq) FROM c WHERE n >= %(keep)s), 0)
  AND EXISTS (SELECT 1 FROM jsonb_array_elements(m.parts::jsonb) p WHERE coalesce(p ->> 'ref', '') <> '')
ORDER BY m.seq LIMIT %(limit)s
FOR UPDATE OF m
"""
# those messages' parts without their blob references (facts and text kept), counts cleared
PARTS_DEMOTE = """
UPDATE messages SET tokens = NULL,
  parts = (SELECT jsonb_agg(p - 'ref' ORDER BY i)
           FROM jsonb_array_elements(parts::jsonb) WITH ORDINALITY AS x (p, i))::text
WHERE thread_id = %(id)s AND seq = ANY (%(seqs)s)
"""
# a message or an input of a thread with a part referring to a blob
REF_IN_PARTS = """
SELECT 1 FROM messages m
WHERE m.thread_id = %(id)s AND m.parts IS NOT NULL AND strpos(m.parts, %(ref)s) > 0
  AND EXISTS (SELECT 1 FROM jsonb_array_elements(m.parts::jsonb) p WHERE p ->> 'ref' = %(ref)s)
UNION ALL
SELECT 1 FROM inputs i
WHERE i.thread_id = %(id)s AND i.parts IS NOT NULL AND strpos(i.parts, %(ref)s) > 0
  AND EXISTS (SELECT 1 FROM jsonb_array_elements(i.parts::jsonb) p WHERE p ->> 'ref' = %(ref)s)
LIMIT 1
"""
# the blobs the parts of a thread's messages before a seq refer to
HISTORY_PART_REFS = """
SELECT DISTINCT p ->> 'ref' FROM messages m, jsonb_array_elements(m.parts::jsonb) p
WHERE m.thread_id = %(id)s AND m.seq < %(cut)s AND m.parts IS NOT NULL
  AND coalesce(p ->> 'ref', '') <> ''
"""
