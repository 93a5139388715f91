"""``dormant demo`` in a subprocess, and ``run_demo`` in process."""

from __future__ import annotations

import re
from pathlib import Path

from dormant.cli.demo import run_demo

from .runner import Cli


def test_demo_small_run(cli: Cli, tmp_path: Path) -> None:
    demo_store = f"sqlite:///{tmp_path}/demo.db"
    (tmp_path / "demo.db").write_bytes(b"")  # an empty leftover is replaced
    result = cli("demo", "--agents", "20", "--turns", "2", "--store", demo_store, store=False)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.search(r"turns/s\s*│?\s*[\d,.]+", out), out
    assert "40 / 40" in out
    assert "completions/s" in out and "RSS at end" in out and "DB on disk" in out
    assert "run_command" in out  # the last exchange shows the tool round trip
    assert "--model NAME --base-url URL" in out
    assert str((tmp_path / "demo.db").resolve()) in out  # says where the database is
    # the demo's database is an ordinary store: the CLI reads it, tool calls included
    shown = cli("show", "agent-0", "--store", demo_store, store=False).stdout
    assert "→ run_command(" in shown
    assert "← run_command" in shown
    assert "42 passed" in shown


def test_demo_refuses_to_delete_a_non_database(cli: Cli, tmp_path: Path) -> None:
    precious = tmp_path / "notes.txt"
    precious.write_text("do not delete me\n")
    result = cli("demo", "--agents", "1", "--turns", "1", "--store", f"sqlite:///{precious}", store=False)
    assert result.returncode == 2
    assert result.stderr.startswith("error: refusing to delete")
    assert precious.read_text() == "do not delete me\n"


async def test_run_demo_summary(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/d.db"
    seen: list[tuple[int, int]] = []
    for _ in range(2):  # the second run starts from a fresh file
        summary = await run_demo(agents=5, turns=2, store=url, on_progress=lambda d, t: seen.append((d, t)))
        assert summary.completions == 20
        assert summary.tool_calls == 10
        assert summary.turns_done == 10
        assert summary.messages == 5 * 2 * 4
        assert summary.failed_threads == 0
        assert summary.turns_per_s > 0
        assert summary.rss_end > 0 and summary.db_bytes > 0
        assert [m.role for m in summary.last_exchange] == ["user", "assistant", "tool", "assistant"]
    assert seen[-1] == (10, 10)


async def test_run_demo_on_memory_store() -> None:
    summary = await run_demo(agents=3, turns=1, store="memory://")
    assert summary.turns_done == 3
    assert summary.db_bytes == 0
