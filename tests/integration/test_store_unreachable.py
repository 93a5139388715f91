"""A database that cannot be reached for a while (a restart, a failover, a partition) is
not the thread's fault: its slices are retried without counting a failure, however many
times the commit is refused, and the thread is never marked failed for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dormant import Agent, Runtime
from dormant.errors import StoreUnreachable
from dormant.models.scripted import ScriptedModel, echo_script
from tests.helpers import all_messages
from tests.integration.conftest import fast_settings


@pytest.mark.timeout(60)
async def test_commits_refused_by_a_lost_connection_never_fail_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = fast_settings(model_retries=2)
    refusals = 3 * (settings.model_retries + 1)  # well past the poison-pill threshold
    agent = Agent(name="a", model=ScriptedModel(echo_script))
    async with Runtime(f"sqlite:///{tmp_path}/x.db", [agent], settings=settings) as rt:
        real = rt.store.commit_slice
        refused = 0

        async def flaky(*args: Any, **kwargs: Any) -> Any:
            nonlocal refused
            if refused < refusals:
                refused += 1
                raise StoreUnreachable("lost or refused the connection to PostgreSQL: server closed")
            return await real(*args, **kwargs)

        monkeypatch.setattr(rt.store, "commit_slice", flaky)
        rt.runner.hold = lambda delay: None  # no pause between the tries: the test stays short
        await rt.send("t", "hello", dedup_key="k")
        await rt.run_until_idle(timeout=30)
        thread = await rt.thread("t")
        assert refused == refusals
        assert (thread.status, thread.failures, thread.error) == ("active", 0, None), thread
        assert [m.content for m in await all_messages(rt.store, "t")] == ["hello", "echo: hello"]
