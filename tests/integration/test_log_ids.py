"""Log records written while a slice or a tool call runs carry its thread, slice and call ids."""

from __future__ import annotations

import io
import json
import logging

from dormant import Agent, Runtime, ScriptedModel, tool
from dormant.logs import JsonFormatter
from dormant.models.scripted import tool_round_trip
from tests.integration.conftest import fast_settings


async def test_a_tool_log_line_names_its_thread_slice_and_call() -> None:
    @tool
    async def probe() -> str:
        """Logs one event."""
        logging.getLogger("dormant.test_probe").warning("probe_ran")
        return "ok"

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("dormant.test_probe")
    logger.addHandler(handler)
    try:
        agent = Agent(name="a", model=ScriptedModel(tool_round_trip("probe", {}, "done")), tools=[probe])
        async with Runtime("memory://", [agent], settings=fast_settings()) as rt:
            await rt.send("thread-7", "go", key="k")
            await rt.run_until_idle(timeout=10)
            history = await rt.history("thread-7")
    finally:
        logger.removeHandler(handler)
    (line,) = [json.loads(x) for x in stream.getvalue().splitlines()]
    call_ids = [c.id for m in history.items for c in m.tool_calls]
    assert line["event"] == "probe_ran"
    assert line["thread_id"] == "thread-7"
    assert line["call_id"] == call_ids[0]
    assert line["slice_id"]
