"""The poison-pill rules of the chaos checker (dormant.bench.chaos_check), on made-up rows:
a pill passes only dead-lettered, within its attempt cap (claims and runs counted), with
its thread answered by the error result once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dormant.bench.chaos_check import ChaosCounts, verify
from dormant.bench.chaos_worker import batches, expected_messages, pill_ids, thread_ids, turn_inputs
from dormant.store.core import USER_KEY_PREFIX

CAP = 3


class FakeDb:
    """A :class:`~dormant.bench.chaos_db.ChaosDb` answering from tables held in lists."""

    poll_s = 0.01

    def __init__(self, tables: dict[str, list[tuple[Any, ...]]]) -> None:
        self.tables = tables

    def rows(self, query: str) -> list[tuple[Any, ...]]:
        """The rows of the table the query reads."""
        table = query.split(" FROM ")[1].split()[0]
        return self.tables[table]

    def progress(self) -> int:
        """Unused by the checker."""
        return 0

    def leased(self) -> dict[str, tuple[str, str | None]]:
        """Unused by the checker."""
        return {}

    def integrity(self) -> list[str] | None:
        """No integrity check (as on PostgreSQL)."""
        return None

    def close(self) -> None:
        """Nothing to close."""


def pill_run(
    tmp_path: Path,
    *,
    status: str = "dead",
    claims: int = CAP + 1,
    runs: int = CAP,
    answer: str | None = None,
    extra: bool = False,
) -> ChaosCounts:
    """Verify a store holding the two pills of a run with no other thread (one wave), the
    crash pill's call ending ``status`` after ``claims`` claims and ``runs`` runs."""
    messages: list[tuple[Any, ...]] = []
    keys: list[tuple[Any, ...]] = []
    threads: list[tuple[Any, ...]] = []
    outbox: list[tuple[Any, ...]] = []
    effects: list[str] = []
    acks: list[str] = []
    input_id = 0
    for tid, kind, _wave in pill_ids(1, 2):
        call = f"{kind}0"
        text_id, result_id = input_id + 1, input_id + 2
        input_id += 2
        crash = kind == "crash"
        result = answer if crash and answer is not None else f"error: gave up: {kind} ran {CAP} times"
        calls = json.dumps([{"id": call, "name": kind, "arguments": "{}"}])
        messages += [
            (tid, 1, "user", "pill", None, None, "user", text_id),
            (tid, 2, "assistant", "pill", calls, None, None, None),
            (tid, 3, "tool", result, None, call, "tool_result", result_id),
            (tid, 4, "assistant", f"done: {result[:40]}", None, None, None, None),
        ]
        if crash and extra:  # the model asked once more: a closing answer twice
            messages.append((tid, 5, "assistant", f"done: {result[:40]}", None, None, None, None))
        keys += [(tid, f"{USER_KEY_PREFIX}pill", text_id), (tid, call, result_id)]
        threads.append((tid, "active", 5 if crash and extra else 4, 0, None, None, None))
        outbox.append((tid, call, status if crash else "dead", kind, claims if crash else CAP))
        effects += [f"{kind} {tid} {call}"] * (runs if crash else CAP)
        acks.append(f"ack {tid} pill {text_id}")
    (tmp_path / "effects.log").write_text("".join(f"{line}\n" for line in effects))
    (tmp_path / "acks.log").write_text("".join(f"{line}\n" for line in acks))
    db = FakeDb(
        {"messages": messages, "input_keys": keys, "inputs": [], "threads": threads, "outbox": outbox}
    )
    return verify(db, tmp_path, 0, 2, pills=1, cap=CAP)


def test_pills_dead_lettered_within_their_cap_pass(tmp_path: Path) -> None:
    counts = pill_run(tmp_path)
    assert counts.problems == []
    assert counts.ok
    assert counts.messages == expected_messages(0, 2, 1) == 8
    assert (counts.pills, counts.pills_dead_lettered) == (2, 2)
    assert (counts.pill_claims_max, counts.pill_runs_max) == (CAP + 1, CAP)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"status": "pending"}, "ended pending, not dead-lettered"),
        ({"claims": CAP + 2}, f"claimed {CAP + 2} times"),
        ({"runs": CAP + 1}, f"ran {CAP + 1} times"),
        ({"answer": "done"}, "was answered ['done']"),
    ],
)
def test_a_pill_past_its_cap_or_unanswered_fails_the_check(
    tmp_path: Path, change: dict[str, Any], problem: str
) -> None:
    counts = pill_run(tmp_path, **change)
    assert counts.poison_violations >= 1
    assert not counts.ok
    assert any(problem in p for p in counts.problems), counts.problems


def test_a_thread_with_a_message_its_script_does_not_make_fails_the_check(tmp_path: Path) -> None:
    counts = pill_run(tmp_path, extra=True)
    assert counts.duplicated == 1 and not counts.ok
    assert any("pill-crash-0: 5 messages, its script makes 4" in p for p in counts.problems), counts.problems


def test_a_turn_and_its_follow_up_are_always_admitted_together() -> None:
    # thread c0001 has a follow-up: with admissions of 2, its pair would straddle a cut
    items = [item for index, t in enumerate(thread_ids(4)) for item in turn_inputs(t, index, 0)]
    assert [i.thread_id for i in items] == ["c0000", "c0001", "c0001", "c0002", "c0003"]
    admissions = list(batches(items, size=2))
    assert [[i.thread_id for i in b] for b in admissions] == [
        ["c0000", "c0001", "c0001"],
        ["c0002", "c0003"],
    ]
    assert [i for b in admissions for i in b] == items
