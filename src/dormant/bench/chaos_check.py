"""Verify a chaos run from what the store holds (and the worker's effect and ack logs).

:func:`verify` reads the store directly (read-only, :mod:`dormant.bench.chaos_db`: the
SQLite file or the PostgreSQL schema) and counts every way the correctness rules of
DESIGN.md §4 could have been broken by the kills:

* ``lost`` — an acknowledged admission missing or replaced, an admitted input never
  recorded as a message, a workload input never admitted, a child's report missing;
* ``duplicated`` — an input recorded twice, a message made from no admitted input,
  the same workload text twice in a thread;
* ``unpaired_tool_calls`` — an assistant tool call answered zero or several times,
  a result answering no earlier call;
* ``order_violations`` — seq gaps, inputs of a thread recorded out of admission
  order, turns out of order, anything landing between a call and its results;
* ``effect_violations`` — a non-idempotent tool run twice, or reported as done
  without having run;
* ``stuck_outbox`` — an entry still pending or running, or dead/unknown without its
  result delivered; ``unfinished`` — a thread still leased, failed, waiting or with
  pending input;
* ``poison_violations`` — a poison pill (DESIGN.md §4 rule 9) not dead-lettered, claimed
  more than its attempt cap + 1 times (the claim past the cap dead-letters it unrun),
  run more than the cap, or its thread not answered with the error result once.

Each problem also adds a line to ``problems`` (the first ones are kept).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from ..inbox import UNKNOWN_OUTCOME
from ..records import ToolCall
from ..store.core import USER_KEY_PREFIX
from .chaos_db import ChaosDb
from .chaos_worker import (
    CHILD_MESSAGES,
    PILL_MESSAGES,
    expected_messages,
    has_follow_up,
    pill_ids,
    spawns,
    thread_ids,
    thread_messages,
)

MAX_PROBLEMS = 50
#: The counters of :class:`ChaosCounts` that must all be 0 for a run to pass.
FAILURES = (
    "lost",
    "duplicated",
    "unpaired_tool_calls",
    "order_violations",
    "effect_violations",
    "stuck_outbox",
    "unfinished",
    "poison_violations",
)
_calls = msgspec.json.Decoder(tuple[ToolCall, ...])


@dataclass
class ChaosCounts:
    """What :func:`verify` counted; every field but the totals must be 0 (or True)."""

    integrity_ok: bool = True
    integrity_checked: bool = False
    inputs: int = 0
    acked_inputs: int = 0
    messages: int = 0
    expected_messages: int = 0
    threads: int = 0
    tool_calls: int = 0
    unknown_outcomes: int = 0
    idempotent_reruns: int = 0
    pills: int = 0
    pills_dead_lettered: int = 0
    pill_claims_max: int = 0
    pill_runs_max: int = 0
    lost: int = 0
    duplicated: int = 0
    unpaired_tool_calls: int = 0
    order_violations: int = 0
    effect_violations: int = 0
    stuck_outbox: int = 0
    unfinished: int = 0
    poison_violations: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every check passed."""
        bad = [getattr(self, name) for name in FAILURES]
        return self.integrity_ok and not any(bad) and self.messages == self.expected_messages

    def flag(self, counter: str, problem: str, n: int = 1) -> None:
        """Count ``n`` problems of kind ``counter`` and keep a description."""
        setattr(self, counter, getattr(self, counter) + n)
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(f"{counter}: {problem}")

    def as_dict(self) -> dict[str, Any]:
        """The counts as JSON data."""
        return asdict(self)


@dataclass
class _Msg:
    seq: int
    role: str
    content: str
    calls: tuple[ToolCall, ...]
    call_id: str | None
    source: str | None
    input_id: int | None


def _read_log(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines() if line.strip()]


def verify(db: ChaosDb, work: Path, threads: int, turns: int, pills: int = 0, cap: int = 3) -> ChaosCounts:
    """Check the store ``db`` after the workload (``threads`` x ``turns``, ``pills`` poison
    pills of each kind with attempt cap ``cap``) completed."""
    counts = ChaosCounts(expected_messages=expected_messages(threads, turns, pills))
    found = db.integrity()
    counts.integrity_checked = found is not None
    if found:
        counts.integrity_ok = False
        counts.problems.append(f"integrity: {found}")
    rows = db.rows(
        "SELECT thread_id, seq, role, content, tool_calls, tool_call_id, source, input_id "
        "FROM messages ORDER BY thread_id, seq"
    )
    keys = db.rows("SELECT thread_id, dedup_key, input_id FROM input_keys")
    pending = db.rows("SELECT thread_id, id, kind FROM inputs")
    thread_rows = db.rows("SELECT id, status, last_seq, awaiting, lease_token, parent_id, error FROM threads")
    outbox = db.rows("SELECT thread_id, call_id, status, tool, attempts FROM outbox")

    history: dict[str, list[_Msg]] = defaultdict(list)
    for tid, seq, role, content, calls, call_id, source, input_id in rows:
        history[tid].append(
            _Msg(seq, role, content, _calls.decode(calls) if calls else (), call_id, source, input_id)
        )
    counts.messages = len(rows)
    counts.inputs = len(keys)
    counts.threads = len(thread_rows)
    probes = [row[0] for row in thread_rows if str(row[0]).startswith("probe-")]
    counts.expected_messages += 2 * len(probes)  # each worker start's probe: its text, an answer
    for tid in probes:
        if [m.role for m in history.get(tid, [])] != ["user", "assistant"]:
            counts.flag(
                "lost", f"{tid}: the probe was not answered once: {[m.role for m in history.get(tid, [])]}"
            )
    if counts.messages != counts.expected_messages:
        counts.problems.append(
            f"messages: {counts.messages} committed, the workload makes {counts.expected_messages}"
        )

    _check_inputs(counts, history, keys, pending, work)
    _check_threads(counts, history, thread_rows, threads, turns)
    answered = _check_calls(counts, history)
    _check_outbox(counts, outbox, answered)
    _check_effects(counts, history, work)
    _check_pills(counts, history, outbox, work, pill_ids(pills, turns), cap)
    return counts


def _check_inputs(
    counts: ChaosCounts,
    history: dict[str, list[_Msg]],
    keys: list[Any],
    pending: list[Any],
    work: Path,
) -> None:
    # keys as admitted: the store keeps user keys in their own namespace
    stored = {(tid, key.removeprefix(USER_KEY_PREFIX)): input_id for tid, key, input_id in keys}
    recorded: Counter[tuple[str, int]] = Counter(
        (tid, m.input_id) for tid, msgs in history.items() for m in msgs if m.input_id is not None
    )
    for (tid, key), input_id in stored.items():
        n = recorded[(tid, input_id)]
        if n == 0:
            counts.flag("lost", f"input {input_id} ({tid} {key}) was admitted but never recorded")
        elif n > 1:
            counts.flag("duplicated", f"input {input_id} ({tid} {key}) recorded {n} times", n - 1)
    admitted = {(tid, input_id) for (tid, _), input_id in stored.items()}
    for (tid, input_id), n in recorded.items():
        if (tid, input_id) not in admitted:
            counts.flag(
                "duplicated", f"{tid}: a message records input {input_id}, which was never admitted", n
            )
    for tid, input_id, kind in pending:
        counts.flag("unfinished", f"{tid}: input {input_id} ({kind}) still pending")
    acked: dict[tuple[str, str], set[int]] = defaultdict(set)
    for parts in _read_log(work / "acks.log"):
        if parts[0] == "ack":
            acked[(parts[1], parts[2])].add(int(parts[3]))
    counts.acked_inputs = len(acked)
    for (tid, key), ids in acked.items():
        if len(ids) > 1 or stored.get((tid, key)) not in ids:
            counts.flag(
                "lost",
                f"{tid} {key}: acknowledged as input {sorted(ids)}, stored as {stored.get((tid, key))}",
            )


def _check_threads(
    counts: ChaosCounts, history: dict[str, list[_Msg]], thread_rows: list[Any], threads: int, turns: int
) -> None:
    by_id = {row[0]: row for row in thread_rows}
    for tid, status, last_seq, awaiting, lease, _parent, error in thread_rows:
        if status != "active" or awaiting or lease is not None:
            counts.flag(
                "unfinished", f"{tid}: status {status}, awaiting {awaiting}, lease {lease}, error {error}"
            )
        msgs = history.get(tid, [])
        if [m.seq for m in msgs] != list(range(1, len(msgs) + 1)) or len(msgs) != last_seq:
            counts.flag("order_violations", f"{tid}: seqs are not 1..{last_seq}")
        for kind in ("text", "result"):
            ids = [
                m.input_id
                for m in msgs
                if m.input_id is not None and (m.role == "tool") == (kind == "result")
            ]
            if ids != sorted(ids):
                counts.flag(
                    "order_violations", f"{tid}: {kind} inputs recorded out of admission order: {ids}"
                )
    for index, tid in enumerate(thread_ids(threads)):
        if tid not in by_id:
            counts.flag("lost", f"thread {tid} does not exist")
            continue
        msgs = history.get(tid, [])
        _check_length(counts, tid, msgs, thread_messages(index, turns))
        texts = [m.content for m in msgs if m.role == "user" and m.source == "user"]
        expected = []
        for turn in range(turns):
            expected.append(f"{tid} turn {turn}")
            if has_follow_up(index):
                expected.append(f"{tid} turn {turn} follow-up")
        for text, n in Counter(texts).items():
            if n > 1:
                counts.flag("duplicated", f"{tid}: {text!r} recorded {n} times", n - 1)
        missing = [t for t in expected if t not in texts]
        for text in missing:
            counts.flag("lost", f"{tid}: {text!r} never recorded")
        if not missing and len(texts) == len(expected) and texts != expected:
            counts.flag("order_violations", f"{tid}: turns recorded as {texts}")
        reports = Counter(m.content.split("]", 1)[0] for m in msgs if m.source == "report")
        for turn in range(turns):
            if not spawns(index, turn):
                continue
            spawned = [
                c.id
                for m in msgs
                for c in m.calls
                if c.name == "spawn_thread" and f"task {turn} of" in c.arguments
            ]
            if len(spawned) != 1:
                counts.flag("lost", f"{tid}: turn {turn} spawned {len(spawned)} children")
                continue
            child = f"{tid}/{spawned[0]}"
            if child not in by_id:
                counts.flag("lost", f"child thread {child} does not exist")
            else:
                _check_length(counts, child, history.get(child, []), CHILD_MESSAGES)
            n = reports[f"[report from thread {child}"]
            if n != 1:
                counts.flag(
                    "lost" if n == 0 else "duplicated", f"{tid}: {n} reports from {child}", max(1, n - 1)
                )


def _check_length(counts: ChaosCounts, tid: str, msgs: list[_Msg], expected: int) -> None:
    """A thread holds exactly the messages its script makes: more is a duplicate (a turn
    the model was asked twice), fewer a loss."""
    if len(msgs) != expected:
        shape = " ".join(f"{m.role[0]}{'*' * len(m.calls)}" for m in msgs[-12:])
        kind = "duplicated" if len(msgs) > expected else "lost"
        counts.flag(kind, f"{tid}: {len(msgs)} messages, its script makes {expected} (last: {shape})")


def _check_calls(counts: ChaosCounts, history: dict[str, list[_Msg]]) -> set[tuple[str, str]]:
    """Pair calls and results in every history; return the answered (thread, call id)s."""
    answered_all: set[tuple[str, str]] = set()
    for tid, msgs in history.items():
        seen: set[str] = set()
        answers: Counter[str] = Counter()
        open_calls: set[str] = set()
        for m in msgs:
            if m.role == "tool":
                if m.call_id is None or m.call_id not in seen:
                    counts.flag(
                        "unpaired_tool_calls", f"{tid} #{m.seq}: a result for no earlier call {m.call_id}"
                    )
                    continue
                answers[m.call_id] += 1
                open_calls.discard(m.call_id)
                if m.content == UNKNOWN_OUTCOME:
                    counts.unknown_outcomes += 1
                continue
            if open_calls:
                counts.flag(
                    "order_violations", f"{tid} #{m.seq}: a {m.role} message lands before the results"
                )
                open_calls.clear()
            for call in m.calls:
                counts.tool_calls += 1
                if call.id in seen:
                    counts.flag("duplicated", f"{tid}: call id {call.id} used twice")
                seen.add(call.id)
                open_calls.add(call.id)
        for call_id in seen:
            n = answers[call_id]
            if n != 1:
                counts.flag("unpaired_tool_calls", f"{tid}: call {call_id} answered {n} times")
            answered_all.add((tid, call_id))
    return answered_all


def _check_outbox(counts: ChaosCounts, outbox: list[Any], answered: set[tuple[str, str]]) -> None:
    for tid, call_id, status, tool, _attempts in outbox:
        if status in ("pending", "running"):
            counts.flag("stuck_outbox", f"{tid} {tool} call {call_id} still {status}")
        elif (tid, call_id) not in answered:
            counts.flag(
                "stuck_outbox", f"{tid} {tool} call {call_id} is {status} but its result never arrived"
            )


def _check_effects(counts: ChaosCounts, history: dict[str, list[_Msg]], work: Path) -> None:
    runs: Counter[tuple[str, str, str]] = Counter(
        (p[0], p[1], p[2]) for p in _read_log(work / "effects.log") if len(p) == 3
    )
    for (kind, tid, call_id), n in runs.items():
        if kind == "charge" and n > 1:
            counts.flag("effect_violations", f"{tid}: charge {call_id} ran {n} times (not idempotent)")
        if kind == "lookup" and n > 1:
            counts.idempotent_reruns += n - 1
    for tid, msgs in history.items():
        for m in msgs:
            if (
                m.role == "tool"
                and m.content.startswith("charged")
                and runs[("charge", tid, m.call_id or "")] != 1
            ):
                counts.flag(
                    "effect_violations", f"{tid}: charge {m.call_id} answered 'charged' but never ran"
                )


def _check_pills(
    counts: ChaosCounts,
    history: dict[str, list[_Msg]],
    outbox: list[Any],
    work: Path,
    pills: list[tuple[str, str, int]],
    cap: int,
) -> None:
    """Each poison pill: its one call dead-lettered, claimed at most ``cap + 1`` times (the
    claim past the cap dead-letters it without running), run at most ``cap`` times, and its
    thread shown the error result exactly once."""
    runs: Counter[tuple[str, str]] = Counter(
        (p[1], p[2]) for p in _read_log(work / "effects.log") if len(p) == 3 and p[0] in ("crash", "wedge")
    )
    calls: dict[str, list[tuple[str, str, str, int]]] = defaultdict(list)
    for tid, call_id, status, tool, attempts in outbox:
        calls[tid].append((call_id, status, tool, int(attempts)))
    counts.pills = len(pills)
    for tid, kind, _wave in pills:
        entries = calls.get(tid, [])
        if len(entries) != 1 or entries[0][2] != kind:
            counts.flag("poison_violations", f"{tid}: {len(entries)} outbox entries, not one {kind} call")
            continue
        call_id, status, _tool, attempts = entries[0]
        ran = runs[(tid, call_id)]
        counts.pill_claims_max = max(counts.pill_claims_max, attempts)
        counts.pill_runs_max = max(counts.pill_runs_max, ran)
        if status == "dead":
            counts.pills_dead_lettered += 1
        else:
            counts.flag("poison_violations", f"{tid}: the {kind} call ended {status}, not dead-lettered")
        if attempts > cap + 1 or ran > cap:
            counts.flag(
                "poison_violations",
                f"{tid}: the {kind} call was claimed {attempts} times and ran {ran} times (cap {cap})",
            )
        _check_length(counts, tid, history.get(tid, []), PILL_MESSAGES)
        results = [m.content for m in history.get(tid, []) if m.role == "tool" and m.call_id == call_id]
        if len(results) != 1 or not results[0].startswith("error:"):
            counts.flag("poison_violations", f"{tid}: the {kind} call was answered {results!r}")
