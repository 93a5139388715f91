"""Finishing an outbox call whose result carries images and files, on PostgreSQL.

``dormant_finish_outbox`` admits a result's text only. A ``done`` outcome with parts is
recorded by :data:`FINISH_WITH_PARTS` instead: one statement that removes the entry
(only while this worker's lease holds it) and admits its result, parts included,
through ``dormant_admit_v2`` — the functions schema 16 already has, so no new function
is needed and workers of the previous release run beside this one. The first answer
still wins: a call answered before (by a reconciliation) keeps that answer.
"""

from __future__ import annotations

from ...records import OutboxOutcome
from .driver import Rows, encode
from .writer import NOTIFY_THREADS, Job

FINISH_WITH_PARTS = """
WITH done AS (
    DELETE FROM outbox b
    WHERE b.id = %(entry)s AND b.status = 'running' AND b.lease_token = %(token)s
    RETURNING b.thread_id, b.call_id, b.tool
)
SELECT count(a.r_input_id) FROM done d, LATERAL dormant_admit_v2(
    jsonb_build_array(jsonb_build_object(
        'thread_id', d.thread_id, 'kind', 'tool_result', 'dedup_key', d.call_id,
        'content', %(content)s::text, 'priority', 1, 'not_before', 0, 'call_id', d.call_id,
        'tool_name', d.tool, 'is_error', %(is_error)s::boolean, 'parts', %(parts)s::jsonb)),
    ARRAY[%(key)s::float8], %(now)s::float8) AS a"""


def _held(rows: Rows, count: int) -> list[bool]:
    return [bool(rows and rows[0][0])]


def finish_with_parts(outcome: OutboxOutcome, now: float, result_key: float) -> Job:
    """The write that records ``outcome`` (``done``, with parts); answers ``[held]``."""
    params = {
        "entry": outcome.entry_id,
        "token": outcome.token,
        "content": outcome.content,
        "is_error": outcome.is_error,
        "parts": encode(outcome.parts),
        "key": result_key,
        "now": now,
    }
    return Job(FINISH_WITH_PARTS, params, _held, entries=[outcome.entry_id], notify=NOTIFY_THREADS)
