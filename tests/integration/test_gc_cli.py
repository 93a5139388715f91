"""``dormant gc`` on a SQLite store: old tool results are cut, the history stays paired."""

from __future__ import annotations

import asyncio
from pathlib import Path

from typer.testing import CliRunner

from dormant.cli.main import app
from dormant.retention.policy import NOTE
from dormant.store.sqlite import SQLiteStore
from tests.contract.test_retention import tool_turns, tools
from tests.contract.test_summary_retention import summarized
from tests.helpers import all_messages, check_history


async def prepare(url: str) -> None:
    store = SQLiteStore(url)
    await store.open()
    try:
        await tool_turns(store, "t", 4, 3000)
    finally:
        await store.close()


async def results(url: str) -> list[str]:
    store = SQLiteStore(url)
    await store.open()
    try:
        history = await all_messages(store, "t")
        check_history(history)
        return [m.content for m in tools(history)]
    finally:
        await store.close()


def test_dormant_gc_keeps_every_tool_result_whole_by_default(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/gc.db"
    asyncio.run(prepare(url))
    done = CliRunner().invoke(app, ["gc", "--store", url, "--keep-tool-calls", "1", "--head-chars", "20"])
    assert done.exit_code == 0, done.output
    assert "gc (keep):" in done.output and "0 tool result(s) cut" in done.output
    assert not any(c.endswith(NOTE) for c in asyncio.run(results(url)))


def test_dormant_gc_cuts_old_tool_results_under_the_long_run_policy(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/gc.db"
    asyncio.run(prepare(url))
    args = ["gc", "--store", url, "--policy", "long-run", "--keep-tool-calls", "1", "--head-chars", "20"]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    assert "3 tool result(s) cut" in done.output
    contents = asyncio.run(results(url))
    assert [c.endswith(NOTE) for c in contents] == [True, True, True, False]
    again = CliRunner().invoke(app, ["gc", "--store", url], env={"DORMANT_RETENTION": "long-run"})
    assert "gc (long-run):" in again.output and "0 tool result(s) cut" in again.output


async def summarized_store(url: str) -> None:
    store = SQLiteStore(url)
    await store.open()
    try:
        await summarized(store, "s", 6)  # summaries up to 2, 4, 6, 8, 10
    finally:
        await store.close()


def test_dormant_gc_deletes_superseded_summaries_and_says_how_many(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/gc.db"
    asyncio.run(summarized_store(url))
    env = {
        "DORMANT_RETENTION": "long-run",
        "DORMANT_RETENTION_FULL_RUNS": "1",
        "DORMANT_RETENTION_METRIC_RUNS": "0",
    }
    done = CliRunner().invoke(app, ["gc", "--store", url], env=env)
    assert done.exit_code == 0, done.output
    # one run of history kept: the runs up to seq 10 go, and the summaries made before
    # then but the 2 newest (DORMANT_RETENTION_SUMMARIES)
    assert "3 superseded summary(ies) deleted" in done.output
    again = CliRunner().invoke(app, ["gc", "--store", url], env={**env, "DORMANT_RETENTION_SUMMARIES": "1"})
    assert "1 superseded summary(ies) deleted" in again.output
