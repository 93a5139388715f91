"""Structured logs: JSON lines, and the ids of the work a record was written for.

Every record of the ``dormant`` loggers has a stable event name as its message and
its facts as ``extra`` fields. :func:`bind` puts ``thread_id``, ``slice_id`` and
``call_id`` in a context variable: the runtime binds them when a slice or a tool
call starts, and since each runs in its own asyncio task, every record written
while it runs (by any module) carries them without passing them around.

``--log-format json`` (``DORMANT_LOG_FORMAT=json``) writes one object a line::

    {"ts": "2026-12-01T09:00:00.123Z", "level": "warning", "logger": "dormant.governor",
     "event": "memory_level", "thread_id": "t1", "before": "ok", "after": "warn", ...}
"""

from __future__ import annotations

import contextvars
import json
import logging
from datetime import UTC, datetime
from typing import Any

#: The ids bound to the current task (see :func:`bind`).
_bound: contextvars.ContextVar[dict[str, str]] = contextvars.ContextVar("dormant_log_ids", default={})  # noqa: B039 - never mutated

#: Attributes every LogRecord has; anything else on a record is an ``extra`` field.
RECORD_FIELDS = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
#: Extra fields longer than this (characters) are cut, so one record stays one bounded line.
MAX_FIELD_CHARS = 4096


def bind(**ids: str | None) -> None:
    """Attach ``ids`` (``thread_id``, ``slice_id``, ``call_id``) to the records the current
    task writes from now on; None removes one."""
    merged = dict(_bound.get())
    for key, value in ids.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    _bound.set(merged)


def bound() -> dict[str, str]:
    """The ids bound to the current task."""
    return dict(_bound.get())


def fields(record: logging.LogRecord) -> dict[str, Any]:
    """A record's facts: the bound ids, then its ``extra`` fields (which win)."""
    out: dict[str, Any] = dict(_bound.get())
    for key, value in record.__dict__.items():
        if key not in RECORD_FIELDS:
            out[key] = value
    return out


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float):
        return value
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= MAX_FIELD_CHARS else text[:MAX_FIELD_CHARS] + "…"


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``ts``, ``level``, ``logger``, ``event``, the ids, the extras."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        line: dict[str, Any] = {
            "ts": stamp.replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        for key, value in fields(record).items():
            line.setdefault(key, _jsonable(value))
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def chain(exc: BaseException, depth: int = 4) -> str:
    """``exc`` and the exceptions it was raised from (``__cause__``, else ``__context__``),
    up to ``depth`` of them, as ``Class: message <- Class: message``: a log field that
    names the driver error under a translated one."""
    links: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and len(links) < depth and id(current) not in seen:
        seen.add(id(current))
        links.append(f"{type(current).__name__}: {str(current).strip()}")
        current = current.__cause__ or current.__context__
    return " <- ".join(links)
