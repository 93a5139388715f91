"""``dormant bench retention``: one thread's store footprint over many tool turns,
without retention and with it (a :func:`dormant.retention.policy.gc_round` every few turns).

A turn is what one agent turn commits, through the store's own slice operations: a
user input, a slice whose reply calls a tool, the tool's result (OUTPUT_KB of text)
and a slice that consumes it and replies; every ``every`` turns that last slice also
writes a compaction summary of the history before it, as the runtime's compaction
does once a thread's history passes its view budget. Time is simulated: a turn takes
``turn_s`` seconds of the store's clock, so the dedup horizon (``horizon_s``) passes
within the run. The store is a SQLite file; its size is ``page_count x page_size``
minus free pages (what the data takes). ``modes`` picks which runs (``none``,
``retention`` or both). Written: one CSV row per sample and ``summary.json`` per mode,
in OUT.
"""

from __future__ import annotations

import csv
import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import apsw

from ..records import CommitPlan, Message, NewCall, NewInput, Summary, ToolCall, ViewLimits
from ..retention.policy import RetentionPolicy, gc_round
from ..slices.step import input_message
from ..store.sqlite import SQLiteStore

THREAD = "agent"
#: The modes :func:`bench` can run, in the order it runs them.
MODES = ("none", "retention")


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


def summary_rows(path: Path) -> int:
    """How many compaction summaries a SQLite store keeps (read on a connection of its own)."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        ((count,),) = conn.execute("SELECT count(*) FROM summaries").fetchall()
    finally:
        conn.close()
    return int(str(count))


class SimClock:
    """The store's clock: moved by hand, a turn at a time."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


async def slice_once(
    store: SQLiteStore, reply: str, calls: tuple[NewCall, ...], *, summarize: bool = False
) -> None:
    """Claim the thread, turn its inputs into messages, reply (with ``calls``), commit;
    with ``summarize``, a summary of the history stored before this slice too."""
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
    last = load.thread.last_seq
    summary = (
        Summary(
            thread_id=THREAD, upto_seq=last, content="s" * 200, tokens=50, covered_tokens=0, made_at_seq=last
        )
        if summarize and last > load.thread.summary_seq
        else None
    )
    plan = CommitPlan(
        thread_id=THREAD,
        token=claims[0].token,
        consumed=tuple(i.id for i in load.inputs),
        messages=tuple(messages),
        calls=calls,
        awaiting=awaiting,
        runs=sum(i.kind == "user" for i in load.inputs),
        summary=summary,
    )
    await store.commit_slice(plan)


async def run_mode(
    out: Path,
    *,
    retention: bool,
    turns: int,
    output_kb: int,
    keep: int,
    every: int,
    sample_every: int,
    turn_s: float = 60.0,
    horizon_s: float = 3600.0,
) -> list[Sample]:
    """Run ``turns`` turns on a fresh store; samples every ``sample_every`` turns."""
    mode = "retention" if retention else "none"
    path = out / f"{mode}.db"
    for stale in out.glob(f"{mode}.db*"):  # the file, its WAL, its workers' lock directory
        if stale.is_dir():
            shutil.rmtree(stale)
        else:
            stale.unlink()
    clock = SimClock()
    store = SQLiteStore(f"sqlite:///{path}", max_input_bytes=max(1, output_kb + 1) * 1024, clock=clock)
    policy = RetentionPolicy.long_run(
        full_tool_calls=keep, dedup_horizon_s=horizon_s, per_round=max(500, 4 * every)
    )
    body = ("0123456789abcdef" * 64 * output_kb)[: output_kb * 1024]
    samples: list[Sample] = []
    start = time.perf_counter()
    await store.open()
    try:
        for turn in range(1, turns + 1):
            clock.now += turn_s
            await store.admit(
                [NewInput(thread_id=THREAD, kind="user", dedup_key=f"u{turn}", content="go", agent="a")]
            )
            call_id = f"call{turn}"
            await slice_once(store, "", (NewCall(call_id=call_id, tool="fetch", arguments="{}"),))
            await store.complete_call(THREAD, call_id, f"result {turn}\n{body}")
            await slice_once(store, "done", (), summarize=turn % every == 0)
            if retention and turn % every == 0:
                await gc_round(store, policy, None, clock.now)
            if turn % sample_every == 0 or turn == turns:
                await store.close()  # checkpoint the WAL so the file is the data
                data, size = sizes(path)
                samples.append(Sample(mode, turn, data, size, round(time.perf_counter() - start, 3)))
                await store.open()
    finally:
        await store.close()
    return samples


async def bench(
    out: Path,
    *,
    turns: int,
    output_kb: int,
    keep: int,
    every: int,
    sample_every: int,
    turn_s: float = 60.0,
    horizon_s: float = 3600.0,
    modes: tuple[str, ...] = MODES,
) -> dict[str, object]:
    """The ``modes`` (both by default), in :data:`MODES` order; writes ``samples.csv``
    and ``summary.json``; the summary. ValueError for an unknown or no mode."""
    if not modes or not set(modes) <= set(MODES):
        raise ValueError(f"modes must be some of {MODES}, not {modes}")
    out.mkdir(parents=True, exist_ok=True)
    samples: list[Sample] = []
    summary: dict[str, object] = {
        "turns": turns,
        "output_kb": output_kb,
        "keep_tool_calls": keep,
        "gc_every_turns": every,
        "simulated_seconds_per_turn": turn_s,
        "dedup_horizon_s": horizon_s,
    }
    for retention in [mode == "retention" for mode in MODES if mode in modes]:
        got = await run_mode(
            out,
            retention=retention,
            turns=turns,
            output_kb=output_kb,
            keep=keep,
            every=every,
            sample_every=sample_every,
            turn_s=turn_s,
            horizon_s=horizon_s,
        )
        samples.extend(got)
        half = min(got, key=lambda s: abs(s.turn - turns / 2))
        summary[got[0].mode] = {
            "final_data_bytes": got[-1].data_bytes,
            "final_file_bytes": got[-1].file_bytes,
            "data_bytes_at_half": half.data_bytes,
            "growth_second_half_bytes": got[-1].data_bytes - half.data_bytes,
            "seconds": got[-1].seconds,
            "final_summary_rows": summary_rows(out / f"{got[0].mode}.db"),
        }
    with (out / "samples.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(asdict(samples[0])))
        writer.writeheader()
        writer.writerows(asdict(s) for s in samples)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
