"""The state journal's pure logic: change validation, replay, checkpoint bodies,
when a checkpoint is due, and the estimated recovery time.

A thread's key/value state is the replay of its journal's change records (``add``,
``update``: set the key to the value, JSON text; ``delete``: remove it). A
checkpoint is an optimisation, never the truth: a *full* one holds the whole state
up to journal seq ``upto``; an *incremental* one the net changes over
``(base, upto]``. Recovery (:mod:`dormant.store.journal`) starts from the newest
recoverable full checkpoint, applies the chain of recoverable increments that
continue it, then replays the change records after the last one applied.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec

from ..errors import InvalidInput
from ..records import JournalEntry, StateChange

if TYPE_CHECKING:
    from ..config import Settings

#: Longest key, in characters.
MAX_KEY_CHARS = 256
#: Largest value of one change, in bytes (JSON text).
MAX_VALUE_BYTES = 64 * 1024
#: Most changes one plan may carry.
MAX_CHANGES = 256

State = dict[str, str]
Delta = dict[str, str | None]


class IncrementBody(msgspec.Struct, frozen=True):
    """The body of an incremental checkpoint: net changes over ``(base, upto]``."""

    base: int
    changes: Delta


_STATE = msgspec.json.Decoder(State)
_INCREMENT = msgspec.json.Decoder(IncrementBody)


def validate_changes(changes: Iterable[StateChange]) -> None:
    """InvalidInput unless every change has a 1..256 character key without NUL, and
    ``add``/``update`` a JSON value of at most 64 KiB (``delete``: no value)."""
    count = 0
    for change in changes:
        count += 1
        if not change.key or len(change.key) > MAX_KEY_CHARS or "\x00" in change.key:
            raise InvalidInput(f"a state key must be 1..{MAX_KEY_CHARS} characters without NUL")
        if change.op == "delete":
            if change.value is not None:
                raise InvalidInput(f"a delete of state key {change.key!r} carries no value")
            continue
        if change.value is None:
            raise InvalidInput(f"an {change.op} of state key {change.key!r} needs a value")
        if len(change.value.encode()) > MAX_VALUE_BYTES:
            raise InvalidInput(f"the value of state key {change.key!r} exceeds {MAX_VALUE_BYTES} bytes")
        try:
            msgspec.json.decode(change.value)
        except msgspec.DecodeError as exc:
            raise InvalidInput(f"the value of state key {change.key!r} is not JSON: {exc}") from None
    if count > MAX_CHANGES:
        raise InvalidInput(f"a slice may change at most {MAX_CHANGES} state keys")


#: Largest state a fork or rewind copies into its new thread, in bytes of keys and values.
MAX_STATE_BYTES = 16 * 1024 * 1024


def validate_state(state: Mapping[str, str]) -> None:
    """InvalidInput unless every key and value is one a change could set (see
    :func:`validate_changes`, without its count limit) and all of them together hold at
    most :data:`MAX_STATE_BYTES`."""
    total = 0
    for key, value in state.items():
        validate_changes([StateChange(op="add", key=key, value=value)])
        total += len(key.encode()) + len(value.encode())
    if total > MAX_STATE_BYTES:
        raise InvalidInput(f"a state of {total} bytes is over the {MAX_STATE_BYTES} bytes a fork copies")


def change(key: str, value: object, state: State) -> StateChange:
    """The change that sets ``key`` to ``value`` (``None``: deletes it) given the current state."""
    if value is None:
        return StateChange(op="delete", key=key)
    return StateChange(
        op="update" if key in state else "add", key=key, value=msgspec.json.encode(value).decode()
    )


def apply(state: State, entry: JournalEntry | StateChange) -> None:
    """Apply one change record to ``state`` in place (checkpoint headers are skipped)."""
    kind = entry.kind if isinstance(entry, JournalEntry) else entry.op
    key = entry.key
    if key is None or kind not in ("add", "update", "delete"):
        return
    if kind == "delete":
        state.pop(key, None)
    elif entry.value is not None:
        state[key] = entry.value


def apply_delta(state: State, delta: Delta) -> None:
    """Apply an incremental checkpoint's net changes in place."""
    for key, value in delta.items():
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value


def encode_full(state: State) -> str:
    """A full checkpoint's body."""
    return msgspec.json.encode(dict(sorted(state.items()))).decode()


def decode_full(body: str) -> State:
    """The state a full checkpoint's body holds."""
    return _STATE.decode(body)


def encode_increment(base: int, delta: Delta) -> str:
    """An incremental checkpoint's body."""
    return msgspec.json.encode(IncrementBody(base=base, changes=dict(sorted(delta.items())))).decode()


def decode_increment(body: str) -> IncrementBody:
    """The net changes an incremental checkpoint's body holds."""
    return _INCREMENT.decode(body)


def digest(body: str) -> str:
    """The sha256 a checkpoint body is verified by."""
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


def split(body: str, part_chars: int) -> list[str]:
    """``body`` in pieces of at most ``part_chars`` characters (at least one piece)."""
    return [body[i : i + part_chars] for i in range(0, len(body), part_chars)] or [""]


@dataclass(frozen=True, slots=True)
class CheckpointPolicy:
    """When checkpoints are written (defaults: docs/retention.md)."""

    incremental_runs: int = 3
    incremental_s: float = 15 * 60
    full_runs: int = 20
    full_s: float = 2 * 3600
    #: a full checkpoint once the increments since the last full one pass this
    full_increment_bytes: int = 50 * 1024 * 1024
    #: characters per stored body piece
    part_chars: int = 64 * 1024

    @classmethod
    def from_settings(cls, settings: Settings) -> CheckpointPolicy:
        """The policy the ``checkpoint_*`` settings (``DORMANT_CHECKPOINT_*``) describe."""
        return cls(
            incremental_runs=settings.checkpoint_incremental_runs,
            incremental_s=settings.checkpoint_incremental_s,
            full_runs=settings.checkpoint_full_runs,
            full_s=settings.checkpoint_full_s,
            full_increment_bytes=settings.checkpoint_full_increment_bytes,
        )

    def __post_init__(self) -> None:
        if min(self.incremental_runs, self.full_runs, self.part_chars) < 1:
            raise ValueError("checkpoint run counts and the part size must be >= 1")
        if min(self.incremental_s, self.full_s) <= 0 or self.full_increment_bytes < 1:
            raise ValueError("checkpoint intervals and the increment budget must be > 0")


def due(
    policy: CheckpointPolicy,
    *,
    now: float,
    runs: int,
    last_full: JournalEntry | None,
    last_any: JournalEntry | None,
    increment_bytes: int,
    changed: bool,
) -> str | None:
    """Which checkpoint is due (``"full"``, ``"incremental"``) or None.

    ``runs`` is the thread's run count; ``last_full``/``last_any`` the newest
    recoverable full checkpoint and newest recoverable checkpoint of any kind;
    ``increment_bytes`` the size of the increments since ``last_full``; ``changed``
    whether change records follow the newest checkpoint (nothing is due otherwise).
    """
    if not changed:
        return None
    if (
        last_full is None
        or runs - last_full.run >= policy.full_runs
        or now - last_full.created_at >= policy.full_s
        or increment_bytes >= policy.full_increment_bytes
    ):
        return "full"
    newest = last_any or last_full
    if runs - newest.run >= policy.incremental_runs or now - newest.created_at >= policy.incremental_s:
        return "incremental"
    return None


def recovery_seconds(
    full_bytes: int,
    increment_bytes: int,
    changes: int,
    *,
    read_bytes_per_s: float = 100 * 1024 * 1024,
    replay_per_s: float = 200_000.0,
) -> float:
    """Estimated recovery time: (full checkpoint bytes + increment bytes) / read speed
    + change records to replay / replay speed."""
    return (full_bytes + increment_bytes) / read_bytes_per_s + changes / replay_per_s
