"""``dormant bench retention``: one thread's store footprint over many tool turns,
without retention and with it (a :func:`dormant.retention.gc_round` every few turns).

A turn is what one agent turn commits, through the store's own slice operations: a
user input, a slice whose reply calls a tool, the tool's result (OUTPUT_KB of text)
and a slice that consumes it and replies. The store is a SQLite file; its size is
``page_count x page_size`` minus free pages (what the data takes). Written: one CSV
row per sample and ``summary.json`` per mode, in OUT.
"""

from __future__ import annotations

import csv
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import apsw

from ..records import CommitPlan, Message, NewCall, NewInput, ToolCall, ViewLimits
from ..retention import RetentionPolicy, gc_round
from ..slice import input_message
from ..store.sqlite import SQLiteStore

THREAD = "agent"


@dataclass(frozen=True, slots=True)
class Sample:
    """The store after ``turn`` turns."""

    mode: str
    turn: int
    data_bytes: int
    file_bytes: int
    seconds: float


def sizes(path: Path) -> tuple[int, int]:
    """(bytes in use, file bytes) of a SQLite database, read on a connection of its own."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        values: list[int] = []
        for name in ("page_size", "page_count", "freelist_count"):
            (row,) = conn.execute(f"PRAGMA {name}").fetchall()
            values.append(int(str(row[0])))
        page, pages, free = values
    finally:
        conn.close()
    return (pages - free) * page, pages * page


async def slice_once(store: SQLiteStore, reply: str, calls: tuple[NewCall, ...]) -> None:
    """Claim the thread, turn its inputs into messages, reply (with ``calls``), commit."""
    claims = await store.claim_threads("bench", 1, 60.0)
    if not claims:
        raise RuntimeError("the bench thread is not ready")
    load = await store.load_slice(claims[0], ViewLimits(max_messages=8))
    seq = load.thread.last_seq
    messages = []
    for item in load.inputs:
        seq += 1
        messages.append(input_message(item, seq, 0.0))
    tool_calls = tuple(ToolCall(id=c.call_id, name=c.tool, arguments=c.arguments) for c in calls)
    messages.append(Message(seq=seq + 1, role="assistant", content=reply, tool_calls=tool_calls))
    awaiting = max(0, load.thread.awaiting - sum(i.kind == "tool_result" for i in load.inputs)) + len(calls)
    plan = CommitPlan(
        thread_id=THREAD,
        token=claims[0].token,
        consumed=tuple(i.id for i in load.inputs),
        messages=tuple(messages),
        calls=calls,
        awaiting=awaiting,
        runs=sum(i.kind == "user" for i in load.inputs),
    )
    await store.commit_slice(plan)


async def run_mode(
    out: Path, *, retention: bool, turns: int, output_kb: int, keep: int, every: int, sample_every: int
) -> list[Sample]:
    """Run ``turns`` turns on a fresh store; samples every ``sample_every`` turns."""
    mode = "retention" if retention else "none"
    path = out / f"{mode}.db"
    for stale in out.glob(f"{mode}.db*"):
        stale.unlink()
    store = SQLiteStore(f"sqlite:///{path}", max_input_bytes=max(1, output_kb + 1) * 1024)
    policy = RetentionPolicy(full_tool_calls=keep)
    body = ("0123456789abcdef" * 64 * output_kb)[: output_kb * 1024]
    samples: list[Sample] = []
    start = time.perf_counter()
    await store.open()
    try:
        for turn in range(1, turns + 1):
            await store.admit(
                [NewInput(thread_id=THREAD, kind="user", dedup_key=f"u{turn}", content="go", agent="a")]
            )
            call_id = f"call{turn}"
            await slice_once(store, "", (NewCall(call_id=call_id, tool="fetch", arguments="{}"),))
            await store.complete_call(THREAD, call_id, f"result {turn}\n{body}")
            await slice_once(store, "done", ())
            if retention and turn % every == 0:
                await gc_round(store, policy, None, time.time())
            if turn % sample_every == 0 or turn == turns:
                await store.close()  # checkpoint the WAL so the file is the data
                data, size = sizes(path)
                samples.append(Sample(mode, turn, data, size, round(time.perf_counter() - start, 3)))
                await store.open()
    finally:
        await store.close()
    return samples


async def bench(
    out: Path, *, turns: int, output_kb: int, keep: int, every: int, sample_every: int
) -> dict[str, object]:
    """Both modes; writes ``samples.csv`` and ``summary.json``; the summary."""
    out.mkdir(parents=True, exist_ok=True)
    samples: list[Sample] = []
    summary: dict[str, object] = {
        "turns": turns,
        "output_kb": output_kb,
        "keep_tool_calls": keep,
        "gc_every_turns": every,
    }
    for retention in (False, True):
        got = await run_mode(
            out,
            retention=retention,
            turns=turns,
            output_kb=output_kb,
            keep=keep,
            every=every,
            sample_every=sample_every,
        )
        samples.extend(got)
        half = min(got, key=lambda s: abs(s.turn - turns / 2))
        summary[got[0].mode] = {
            "final_data_bytes": got[-1].data_bytes,
            "final_file_bytes": got[-1].file_bytes,
            "data_bytes_at_half": half.data_bytes,
            "growth_second_half_bytes": got[-1].data_bytes - half.data_bytes,
            "seconds": got[-1].seconds,
        }
    with (out / "samples.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(asdict(samples[0])))
        writer.writeheader()
        writer.writerows(asdict(s) for s in samples)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
