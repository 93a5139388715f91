"""State registers: the short-term register of a thread, in its state journal.

The **short-term register** (TSR) of a thread holds the entity anchors of its last
few user turns (``order_id: "ORD-7892"``). It lives in the thread's state journal
(:mod:`dormant.journal.rules`), so it commits with the slice that set it, in the same
transaction, and a crash at any point leaves the register equal to the replay of the
committed journal. The journal keys it uses:

* ``tsr:<key>`` — an entry: ``{"v": <value>, "turn": <n>}`` (the user turn it was set in);
* ``_turn`` — the thread's user-turn count (advanced by each slice that takes user input);
* ``_subject`` — the thread's subject (a binding key), from the newest input that named one.

An entry set more than ``tsr_turns`` turns ago is deleted by the slice that passes it
(a change record too), so the register is the journal's entries, nothing else.

The **long-term register** (LSR) of a subject is its profile: key → JSON, kept as
memory records of kind ``profile`` whose key tag is the register key, so a new value
supersedes the old one (:mod:`dormant.memory`). A TSR change to a key declared long
term (:attr:`dormant.subject.SubjectOptions.long_term`) writes it too.

Pure logic: :func:`finish` turns a slice's state changes into the journal's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from ..records import Input, StateChange

__all__ = [
    "SUBJECT_KEY",
    "TSR_PREFIX",
    "TURN_KEY",
    "Registers",
    "finish",
    "is_binding_key",
    "read",
    "subject_of",
]

TSR_PREFIX: Final = "tsr:"
TURN_KEY: Final = "_turn"
SUBJECT_KEY: Final = "_subject"
#: What a binding key starts with (:func:`dormant.memory.bind`: ``b2_``; ``b1_`` for
#: the keys of stores made before keys were keyed hashes, moved when next bound).
BINDING_PREFIXES: Final = ("b2_", "b1_")

_ENTRY = msgspec.json.Decoder(dict[str, Any])


def is_binding_key(text: str | None) -> bool:
    """Whether ``text`` is a binding key (what an input's ``source`` carries when its
    sender was identified at admission)."""
    return text is not None and text.startswith(BINDING_PREFIXES) and len(text) <= 80


@dataclass(frozen=True, slots=True)
class Registers:
    """A thread's registers as a slice sees them: its subject, turn and TSR entries
    (``key -> JSON value``, newest turn first)."""

    subject: str | None
    turn: int
    entries: tuple[tuple[str, str], ...]
    #: the turn each entry was set in
    turns: Mapping[str, int]


def read(state: Mapping[str, str]) -> Registers:
    """The registers in a thread's journal state (see the module docstring)."""
    subject = _decode(state.get(SUBJECT_KEY))
    turn = _decode(state.get(TURN_KEY))
    found: list[tuple[int, str, str]] = []
    for name, raw in state.items():
        if not name.startswith(TSR_PREFIX):
            continue
        entry = _decode(raw)
        if isinstance(entry, dict) and "v" in entry:
            value = msgspec.json.encode(entry["v"]).decode()
            found.append((int(entry.get("turn", 0)), name[len(TSR_PREFIX) :], value))
    found.sort(key=lambda item: (-item[0], item[1]))
    return Registers(
        subject=subject if isinstance(subject, str) else None,
        turn=turn if isinstance(turn, int) else 0,
        entries=tuple((key, value) for _, key, value in found),
        turns={key: t for t, key, _ in found},
    )


def _decode(raw: str | None) -> Any:
    if raw is None:
        return None
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None


def subject_of(inputs: Sequence[Input], current: str | None) -> str | None:
    """The thread's subject after ``inputs``: the newest binding key an input carries
    (its ``source``), else ``current``."""
    for item in reversed(inputs):
        if item.kind == "user" and is_binding_key(item.source):
            return item.source
    return current


def finish(
    registers: Registers,
    changes: Iterable[StateChange],
    *,
    subject: str | None,
    user_turns: int,
    tsr_turns: int,
) -> tuple[tuple[StateChange, ...], tuple[tuple[str, str | None], ...]]:
    """The journal changes of a slice of a subject's thread, and its register writes.

    ``changes`` are what the slice's tools set (plain keys, JSON values; a delete
    clears). Each becomes a TSR entry of the current turn (the thread's turn plus the
    ``user_turns`` this slice takes); entries older than ``tsr_turns`` turns are
    deleted; the turn counter and the subject are journaled when they change.
    Returns the journal changes and ``(key, JSON value or None)`` of every register
    write (for the long-term register).
    """
    turn = registers.turn + user_turns
    out: list[StateChange] = []
    writes: list[tuple[str, str | None]] = []
    live = dict(registers.turns)
    if subject is not None and subject != registers.subject:
        out.append(_set(SUBJECT_KEY, subject, registers.subject is None))
    if user_turns:
        out.append(_set(TURN_KEY, turn, registers.turn == 0))
    for change in changes:
        key = change.key
        name = TSR_PREFIX + key  # prefixed: a tool cannot touch the bookkeeping keys
        if change.op == "delete" or change.value is None:
            if key in live:
                out.append(StateChange(op="delete", key=name))
                del live[key]
            writes.append((key, None))
            continue
        entry = {"v": msgspec.json.decode(change.value), "turn": turn}
        out.append(_set(name, entry, key not in live))
        live[key] = turn
        writes.append((key, change.value))
    for key, set_at in sorted(live.items()):
        if set_at <= turn - tsr_turns:
            out.append(StateChange(op="delete", key=TSR_PREFIX + key))
    return tuple(out), tuple(writes)


def _set(key: str, value: object, new: bool) -> StateChange:
    return StateChange(op="add" if new else "update", key=key, value=msgspec.json.encode(value).decode())
