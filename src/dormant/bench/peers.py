"""The agent_scale workload on LangGraph's checkpointers and on dormant, side by side.

LangGraph runs its stock prebuilt ReAct agent (``create_react_agent``) with a scripted
chat model that answers exactly as dormant's scripted agent_scale model does: the
assistant text (12 pieces) with one ``run_command`` tool call, then after the tool
result the same text alone; the tool returns the same summary. One system per process
(``python -m dormant.bench.peers '<json>'``), so RSS is each system's own:

* ``langgraph-sqlite`` (``SqliteSaver`` on a file), ``langgraph-postgres``
  (``PostgresSaver``, the benchmark's PostgreSQL: embedded unless
  ``DORMANT_BENCH_PG_DSN`` names one), ``langgraph-memory`` (``InMemorySaver``);
* ``dormant-sqlite``, ``dormant-postgres``, ``dormant-memory``: :func:`run_scale`.

Every run is checked: every thread's messages (up to ``check`` threads, spread over
the run) are read back and compared with what the workload sent and the model said:
four messages a turn, the user texts, the assistant texts, the tool results. A run
that did not do the work exits non-zero. Needs the ``peers`` extra
(``pip install 'dormant[peers]'``) for the LangGraph systems.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ..runtime import Runtime
from .scale import (
    ASSISTANT_REPEAT,
    ASSISTANT_TEXT,
    TOOL_ARGS,
    TOOL_RESULT,
    rss_bytes,
    run_scale,
    trim,
    user_text,
)
from .stats import slope_per_unit

PEERS = ("langgraph-sqlite", "langgraph-postgres", "langgraph-memory")
OURS = ("dormant-sqlite", "dormant-postgres", "dormant-memory")
#: each dormant system and the peer it is compared with
PAIRS = dict(zip(OURS, PEERS, strict=True))
PEER_PACKAGES = ("langgraph", "langgraph.checkpoint.sqlite", "langgraph.checkpoint.postgres")
BODY = ASSISTANT_TEXT * ASSISTANT_REPEAT


def missing_peer_packages() -> list[str]:
    """The import names of the ``peers`` extra this environment lacks."""
    import importlib.util

    missing = []
    for name in PEER_PACKAGES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def sample(agents: int, check: int) -> list[int]:
    """At most ``check`` agent indexes, spread evenly over ``0..agents-1`` (all when fewer)."""
    if check >= agents:
        return list(range(agents))
    step = agents / check
    return sorted({int(i * step) for i in range(check)})


def expected_problems(thread_id: str, turns: int, messages: Sequence[tuple[str, str]]) -> list[str]:
    """What is wrong with a thread's ``(role, content)`` messages against the workload."""
    if len(messages) != 4 * turns:
        return [f"{thread_id}: {len(messages)} messages, not {4 * turns}"]
    problems = []
    for t in range(turns):
        got = messages[4 * t : 4 * t + 4]
        want = [
            ("user", user_text(t, thread_id)),
            ("assistant", BODY),
            ("tool", TOOL_RESULT),
            ("assistant", BODY),
        ]
        if list(got) != want:
            problems.append(f"{thread_id}: turn {t} differs")
    return problems


def _chat_model() -> Any:
    """The scripted LangChain chat model (imported late: the ``peers`` extra)."""
    import os

    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class ScriptedChat(BaseChatModel):
        """Text and one ``run_command`` call; after a tool result, the text alone."""

        def _generate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> Any:
            if isinstance(messages[-1], ToolMessage):
                reply = AIMessage(content=BODY)
            else:
                call = {"name": "run_command", "args": dict(TOOL_ARGS), "id": f"call_{os.urandom(16).hex()}"}
                reply = AIMessage(content=BODY, tool_calls=[call])
            return ChatResult(generations=[ChatGeneration(message=reply)])

        @property
        def _llm_type(self) -> str:
            return "scripted-agent-scale"

        def bind_tools(self, tools: Any, **kw: Any) -> Any:
            return self

    return ScriptedChat()


def _role(message: Any) -> str:
    kind = str(message.type)
    return {"human": "user", "ai": "assistant", "tool": "tool"}.get(kind, kind)


def _langgraph_saver(system: str, workdir: Path) -> tuple[Any, Any, str]:
    """(checkpointer, closer, postgres url or '') of a LangGraph system."""
    if system == "langgraph-memory":
        from langgraph.checkpoint.memory import InMemorySaver

        return InMemorySaver(), None, ""
    if system == "langgraph-sqlite":
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(workdir / "peer.db", check_same_thread=False)
        return SqliteSaver(conn), conn, ""
    from langgraph.checkpoint.postgres import PostgresSaver

    from .pg import bench_postgres_url

    url = bench_postgres_url()
    manager = PostgresSaver.from_conn_string(url)
    saver = manager.__enter__()
    saver.setup()
    return saver, manager, url


def _waves(agents: int, wave: int) -> Iterator[list[str]]:
    for first in range(0, agents, wave):
        yield [f"agent-{i}" for i in range(first, min(first + wave, agents))]


def run_langgraph(
    system: str, *, agents: int, turns: int, wave: int, check: int, out: Path
) -> dict[str, Any]:
    """The workload on one LangGraph checkpointer (one agent's turn after another)."""
    from langchain_core.tools import tool as lc_tool
    from langgraph.prebuilt import create_react_agent

    @lc_tool
    def run_command(command: str) -> str:
        """Run a shell command (the benchmark returns a fixed test summary)."""
        return TOOL_RESULT

    workdir = out / "data"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    trim()
    rss_start = rss_bytes()
    saver, closer, url = _langgraph_saver(system, workdir)
    with warnings.catch_warnings():  # the stock prebuilt agent, deprecated in favour of langchain's
        warnings.simplefilter("ignore")
        graph = create_react_agent(_chat_model(), [run_command], checkpointer=saver)
    turn_times: dict[int, list[float]] = {}
    points: list[tuple[float, float]] = []
    started = time.perf_counter()
    for ids in _waves(agents, wave):
        for turn in range(turns):
            t0 = time.perf_counter()
            for tid in ids:
                graph.invoke(
                    {"messages": [("user", user_text(turn, tid))]}, {"configurable": {"thread_id": tid}}
                )
            turn_times.setdefault(turn, []).append(time.perf_counter() - t0)
        trim()
        points.append((float(int(ids[-1].split("-")[1]) + 1), float(rss_bytes())))
    elapsed = time.perf_counter() - started
    problems: list[str] = []
    checked = sample(agents, check)
    for i in checked:
        tid = f"agent-{i}"
        state = graph.get_state({"configurable": {"thread_id": tid}})
        msgs = [(_role(m), str(m.content)) for m in state.values.get("messages", [])]
        problems += expected_problems(tid, turns, msgs)
    if system == "langgraph-sqlite":
        disk = sum(p.stat().st_size for p in workdir.glob("peer.db*"))
    elif system == "langgraph-postgres":
        from .pg import schema_bytes

        disk = schema_bytes(url)
    else:
        disk = 0
    summary = _summary(system, agents, turns, elapsed, rss_start, points, disk, turn_times, checked, problems)
    if system == "langgraph-postgres":
        closer.__exit__(None, None, None)
    elif closer is not None:
        closer.close()
    shutil.rmtree(workdir, ignore_errors=True)
    return summary


def _summary(
    system: str,
    agents: int,
    turns: int,
    elapsed: float,
    rss_start: int,
    points: list[tuple[float, float]],
    disk: int,
    turn_times: dict[int, list[float]],
    checked: list[int],
    problems: list[str],
) -> dict[str, Any]:
    first = sum(turn_times.get(0, [0.0])) / max(1, len(turn_times.get(0, [])))
    last = sum(turn_times.get(turns - 1, [0.0])) / max(1, len(turn_times.get(turns - 1, [])))
    return {
        "system": system,
        "agents": agents,
        "turns": turns,
        "elapsed_s": round(elapsed, 3),
        "turns_per_s": round(agents * turns / elapsed, 1),
        "rss_start_bytes": rss_start,
        "rss_end_bytes": int(points[-1][1]) if points else rss_bytes(),
        "rss_slope_kib_per_agent": round(slope_per_unit(points[1:] if len(points) > 2 else points), 4),
        "disk_bytes_per_agent": round(disk / agents, 1),
        "turn_first_ms": round(first * 1000, 2),
        "turn_last_ms": round(last * 1000, 2),
        "turn_last_over_first": round(last / first, 3) if first else None,
        "threads_checked": len(checked),
        "problems": problems[:20],
        "verified": not problems and bool(checked),
    }


async def run_dormant(
    system: str, *, agents: int, turns: int, wave: int, check: int, out: Path
) -> dict[str, Any]:
    """The workload on dormant (:func:`run_scale`), every sampled thread read back."""
    kind = system.removeprefix("dormant-")
    checked = sample(agents, check)
    problems: list[str] = []

    async def verify(rt: Runtime) -> None:
        for i in checked:
            tid = f"agent-{i}"
            page = await rt.history(tid, limit=1_000)
            problems.extend(expected_problems(tid, turns, [(m.role, m.content) for m in page.items]))

    result = await run_scale(kind, agents=agents, turns=turns, wave=wave, out=out, before_close=verify)
    turn_times = {0: [result.turn_latency_first_ms / 1000], turns - 1: [result.turn_latency_last_ms / 1000]}
    points = [(float(w.agents), float(w.rss_bytes)) for w in result.waves]
    return _summary(
        system,
        agents,
        turns,
        result.elapsed_s,
        result.rss_start_bytes,
        points,
        result.db_bytes,
        turn_times,
        checked,
        problems,
    )


def main(argv: list[str] | None = None) -> None:
    """``python -m dormant.bench.peers '{"system": ..., "agents": ..., "turns": ..., "wave": ...,
    "check": ..., "out": ...}'``: prints ``result PATH``; exits 1 when the work was not done."""
    args = json.loads((argv if argv is not None else sys.argv[1:])[0])
    system = args.pop("system")
    out = Path(args.pop("out"))
    out.mkdir(parents=True, exist_ok=True)
    if system in PEERS:
        summary = run_langgraph(system, out=out, **args)
    elif system in OURS:
        summary = asyncio.run(run_dormant(system, out=out, **args))
    else:
        raise SystemExit(f"unknown system {system!r}: one of {', '.join(PEERS + OURS)}")
    (out / "peer.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"result {out / 'peer.json'}", flush=True)
    if not summary["verified"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
