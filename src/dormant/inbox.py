"""Admission rules of the durable inbox: validation, size limit and ordering key.

Every backend calls :func:`validate` before it writes anything and stores
:func:`sort_key` with each input; the scheduler claims threads in order of the
smallest key among their ready inputs. The key is the admission time plus an
aging offset per priority class, so P0 runs before P1 before P2 among inputs
admitted together, yet a P2 input that has waited ``AGING[P2]`` seconds beats
any input admitted after it: no class starves.
"""

from __future__ import annotations

from collections.abc import Sequence

from .errors import InvalidInput
from .records import INPUT_KINDS, NewInput, Priority

DEFAULT_MAX_INPUT_BYTES = 1024 * 1024
MAX_DEDUP_KEY_BYTES = 512
MAX_THREAD_ID_BYTES = 256

#: Seconds added to the admission time per class; bounds how long a class can be overtaken.
AGING: dict[Priority, float] = {Priority.P0: 0.0, Priority.P1: 5.0, Priority.P2: 60.0}

#: The text a thread receives when a non-idempotent tool call was interrupted by a crash.
UNKNOWN_OUTCOME = (
    "outcome unknown: this tool call was interrupted (worker crash or lost lease) after it "
    "started; its side effect may or may not have happened, and it was not re-run. "
    "Check the effect before trying again."
)


def sort_key(item: NewInput, admitted_at: float) -> float:
    """Scheduling key of an input: when it may run, plus its class's aging offset."""
    return max(admitted_at, item.not_before) + AGING[item.priority]  # IntEnum keys hash as ints


def validate(items: Sequence[NewInput], max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> None:
    """Refuse malformed or oversized inputs with :class:`InvalidInput`; writes nothing."""
    for item in items:
        if not item.thread_id or len(item.thread_id.encode()) > MAX_THREAD_ID_BYTES:
            raise InvalidInput(f"thread id must be 1..{MAX_THREAD_ID_BYTES} bytes")
        if not item.dedup_key or len(item.dedup_key.encode()) > MAX_DEDUP_KEY_BYTES:
            raise InvalidInput(
                f"dedup key must be 1..{MAX_DEDUP_KEY_BYTES} bytes (thread {item.thread_id!r})"
            )
        if item.kind not in INPUT_KINDS:
            raise InvalidInput(f"unknown input kind {item.kind!r}")
        try:
            Priority(item.priority)
        except ValueError:
            raise InvalidInput(f"priority must be 0, 1 or 2, not {item.priority!r}") from None
        size = len(item.content.encode())
        if size > max_input_bytes:
            raise InvalidInput(
                f"input of {size} bytes for thread {item.thread_id!r} exceeds the limit of "
                f"{max_input_bytes} bytes (DORMANT_MAX_INPUT_BYTES)"
            )
        if item.kind == "tool_result" and not item.call_id:
            raise InvalidInput("a tool_result input needs the call_id it answers")


def consumable(kind: str, awaiting: int) -> bool:
    """Whether an input of ``kind`` may be consumed by a thread with ``awaiting`` open calls.

    While a thread waits for async tool results, only tool results are consumed:
    other inputs wait so that no message lands between a tool call and its result.
    """
    return awaiting == 0 or kind == "tool_result"
