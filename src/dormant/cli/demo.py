"""``dormant demo``: many scripted coding agents on an embedded SQLite file.

Every agent runs a :class:`~dormant.models.ScriptedModel` that, each turn, asks
for the async tool ``run_command`` (``pytest -q``) and then answers once the
result is back: two completions and one async tool round trip through the
outbox per turn. The demo drives the agents in waves (one user input per agent
per turn, then run until idle) and prints throughput, process memory and the
size of the database on disk.

Its own memory is bounded: inputs are admitted in fixed-size batches and
nothing is kept per agent; figures come from counters and the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ..agent import Agent
from ..config import Settings
from ..errors import UsageError
from ..models import ScriptedModel, tool_round_trip
from ..records import Message, NewInput
from ..runtime import Runtime
from ..store import open_store
from ..tools.spec import ToolSpec, make_tool

DEFAULT_DEMO_STORE = "sqlite:///dormant-demo.db"
DEMO_AGENT = "coder"
#: Inputs admitted per store call: bounds the demo's own memory whatever ``agents`` is.
ADMIT_BATCH = 500
SENTENCE = "I ran the test suite; all 42 tests pass and the change is ready for review. "
TEST_SUMMARY = "collected 42 items\n\n.......................................... [100%]\n\n42 passed in 0.87s"
_SQLITE_MAGIC = b"SQLite format 3\x00"


async def run_command(command: str) -> str:
    """Run a shell command in the agent's workspace and return its output (faked by the demo)."""
    return f"$ {command}\n{TEST_SUMMARY}"


# make_tool is @tool without the decorator syntax (the decorator is typed as returning Any)
RUN_COMMAND: ToolSpec = make_tool(run_command, mode="async", idempotent=True, timeout=10.0)


def demo_agent(*, repeat: int = 3) -> Agent:
    """The demo's agent: a scripted model doing one async ``run_command`` round trip per turn."""
    model = ScriptedModel(
        tool_round_trip("run_command", {"command": "pytest -q"}, SENTENCE, repeat=repeat),
        name="scripted-coder",
    )
    return Agent(
        name=DEMO_AGENT,
        model=model,
        system_prompt="You are a coding agent. Run the tests before you answer.",
        tools=[RUN_COMMAND],
        builtins=False,
    )


@dataclass(frozen=True, slots=True)
class DemoSummary:
    """What one demo run did and what it cost."""

    store: str
    path: str | None  # the SQLite file, None for other stores
    agents: int
    turns: int
    completions: int
    tool_calls: int
    messages: int
    failed_threads: int
    elapsed_s: float
    rss_start: int
    rss_end: int
    db_bytes: int
    wal_bytes: int
    slice_p50_s: float
    slice_p95_s: float
    last_exchange: tuple[Message, ...]  # agent-0's last messages, oldest first (at most 4)

    @property
    def turns_done(self) -> int:
        """Agent turns completed (each is two completions)."""
        return self.completions // 2

    @property
    def turns_per_s(self) -> float:
        """Completed agent turns per second of wall time."""
        return self.turns_done / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def completions_per_s(self) -> float:
        """Model completions per second of wall time."""
        return self.completions / self.elapsed_s if self.elapsed_s > 0 else 0.0


def rss_bytes() -> int:
    """This process's resident set size: VmRSS from /proc, else psutil."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    import psutil

    return int(psutil.Process().memory_info().rss)


def sqlite_path(url: str) -> str | None:
    """The file a SQLite store URL opens (as the store resolves it), None for other stores."""
    path = open_store(url).path
    return os.path.realpath(path) if path is not None else None


def fresh_sqlite(url: str) -> None:
    """Delete the SQLite file of ``url`` and its -wal/-shm, so the demo starts empty.

    Does nothing for other stores. Refuses (:class:`UsageError`) to delete a file
    that is not a SQLite database, so a mistyped path cannot destroy other data.
    """
    path = sqlite_path(url)
    if path is None:
        return
    if os.path.isdir(path):
        raise UsageError(f"demo store {path!r} is a directory")
    if os.path.exists(path) and os.path.getsize(path) > 0:
        with open(path, "rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
        if head != _SQLITE_MAGIC:
            raise UsageError(f"refusing to delete {path!r}: it is not a SQLite database")
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.remove(path + suffix)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise UsageError(f"cannot delete the old demo database {path + suffix!r}: {exc}") from exc


async def run_demo(
    *,
    agents: int = 2000,
    turns: int = 5,
    store: str = DEFAULT_DEMO_STORE,
    concurrency: int | None = None,
    settings: Settings | None = None,
    fresh: bool = True,
    on_progress: Callable[[int, int], None] | None = None,
) -> DemoSummary:
    """Run ``agents`` scripted agents for ``turns`` turns each on ``store``.

    ``on_progress(turns_done, total)`` is called a few times a second. With
    ``fresh`` a SQLite store's file is deleted first (see :func:`fresh_sqlite`).
    Raises :class:`UsageError` for non-positive counts.
    """
    if agents < 1 or turns < 1:
        raise UsageError("the demo needs at least one agent and one turn")
    settings = settings or Settings.from_env(store=store, concurrency=concurrency)
    if fresh:
        fresh_sqlite(store)
    total = agents * turns
    rss_start = rss_bytes()
    async with Runtime(store, [demo_agent()], settings=settings) as rt:
        stop_watch = asyncio.Event()

        async def watch() -> None:
            while not stop_watch.is_set():
                if on_progress is not None:
                    on_progress(min(rt.stats.completions // 2, total), total)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop_watch.wait(), 0.1)

        watcher = asyncio.create_task(watch())
        started = time.perf_counter()
        try:
            for turn in range(1, turns + 1):
                for first in range(0, agents, ADMIT_BATCH):
                    batch = [
                        NewInput(
                            thread_id=f"agent-{i}",
                            kind="user",
                            dedup_key=f"turn-{turn}",
                            content=f"Turn {turn}: please run the tests and report.",
                            agent=DEMO_AGENT,
                        )
                        for i in range(first, min(first + ADMIT_BATCH, agents))
                    ]
                    await rt.admit(batch)
                await rt.run_until_idle()
            elapsed = time.perf_counter() - started
        finally:
            stop_watch.set()
            await watcher
        if on_progress is not None:
            on_progress(min(rt.stats.completions // 2, total), total)
        status = await rt.status()
        last = await rt.history("agent-0", limit=4, newest_first=True)
        return DemoSummary(
            store=store,
            path=sqlite_path(store),
            agents=agents,
            turns=turns,
            completions=rt.stats.completions,
            tool_calls=rt.stats.tool_calls,
            messages=status.messages,
            failed_threads=status.threads_by_status.get("failed", 0),
            elapsed_s=elapsed,
            rss_start=rss_start,
            rss_end=rss_bytes(),
            db_bytes=status.db_bytes,
            wal_bytes=status.wal_bytes,
            slice_p50_s=rt.stats.slice_latency.percentile(50),
            slice_p95_s=rt.stats.slice_latency.percentile(95),
            last_exchange=tuple(reversed(last.items)),
        )


# -- rendering ---------------------------------------------------------------------------


def human_bytes(n: int) -> str:
    """``n`` bytes as a short human figure (``12.3 MiB``)."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"  # pragma: no cover


def summary_table(summary: DemoSummary) -> Table:
    """The demo's figures as a two-column table."""
    table = Table(title="dormant demo", show_header=False, title_justify="left")
    table.add_column("figure", style="bold")
    table.add_column("value", justify="right")
    rows = [
        ("store", summary.store),
        *([("database file", summary.path)] if summary.path else []),
        ("agents", f"{summary.agents:,}"),
        ("turns per agent", f"{summary.turns:,}"),
        ("turns done", f"{summary.turns_done:,} / {summary.agents * summary.turns:,}"),
        ("completions", f"{summary.completions:,}"),
        ("async tool calls", f"{summary.tool_calls:,}"),
        ("messages stored", f"{summary.messages:,}"),
        ("failed threads", f"{summary.failed_threads:,}"),
        ("elapsed", f"{summary.elapsed_s:.2f} s"),
        ("turns/s", f"{summary.turns_per_s:,.1f}"),
        ("completions/s", f"{summary.completions_per_s:,.1f}"),
        ("RSS at start", human_bytes(summary.rss_start)),
        ("RSS at end", human_bytes(summary.rss_end)),
        ("DB on disk", human_bytes(summary.db_bytes)),
        ("WAL on disk", human_bytes(summary.wal_bytes)),
        ("slice p50", f"{summary.slice_p50_s * 1000:.1f} ms"),
        ("slice p95", f"{summary.slice_p95_s * 1000:.1f} ms"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def exchange_text(messages: tuple[Message, ...], *, max_chars: int = 300) -> Text:
    """A few messages as readable lines: role, text, tool calls and tool results."""
    text = Text()
    for message in messages:
        content = message.content
        if len(content) > max_chars:
            content = content[:max_chars] + "…"
        style = {"user": "cyan", "assistant": "green", "tool": "magenta"}[message.role]
        label = f"#{message.seq} {message.role}"
        if message.role == "tool":
            label += f" ({message.name or 'tool'})"
        text.append(label + ": ", style=f"bold {style}")
        text.append(content.replace("\n", " ⏎ ") if message.role == "tool" else content)
        text.append("\n")
        for call in message.tool_calls:
            text.append(f"    → {call.name}({call.arguments})\n", style="dim")
    return text


async def demo_command(
    console: Console,
    *,
    agents: int,
    turns: int,
    store: str,
    concurrency: int | None,
) -> DemoSummary:
    """What ``dormant demo`` does: run with a progress bar, then print the figures."""
    settings = Settings.from_env(store=store, concurrency=concurrency)
    console.print(
        f"dormant demo: {agents:,} agents x {turns} turns on {store} "
        f"(concurrency {settings.concurrency}); each turn = 2 completions + 1 async tool call"
    )
    progress = Progress(
        TextColumn("[bold]turns"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )
    with progress:
        task = progress.add_task("turns", total=agents * turns)

        def on_progress(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        summary = await run_demo(
            agents=agents,
            turns=turns,
            store=store,
            settings=settings,
            on_progress=on_progress,
        )
    console.print(summary_table(summary))
    if summary.last_exchange:
        console.print(Text("last exchange of agent-0:", style="bold"))
        console.print(exchange_text(summary.last_exchange), end="")
    console.print(
        "Try a real model: dormant chat my-thread --model NAME --base-url URL "
        "(any OpenAI-compatible server; the API key comes from OPENAI_API_KEY)."
    )
    return summary
