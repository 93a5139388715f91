"""The short-term register after crash points: random register changes,
slices that fail after their tools set state (the retried slice sets other values),
and runtimes reopened at random points (the register cache lost). After each step the
register read back, and the one the next prompt shows, equal the replay of the
committed journal — and a value only a failed slice set never appears. The thread
row's state column (what the next slice loads) equals that replay too."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from tempfile import TemporaryDirectory

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dormant import Agent, ModelReply, ModelRequest, Runtime, ScriptedModel, ToolCall
from dormant.errors import ModelError
from dormant.memory import HashingEmbedder
from dormant.subject import SubjectOptions
from tests.faults.test_journal_crashes import row_state_of
from tests.integration.conftest import fast_settings

IDENTITY = {"phone": "+1 555 0199", "device": "d1"}


class Script:
    """A user message ``set k=v,...[!]`` makes one set_state call per pair; with ``!``
    the first attempt sets ``k=CRASH`` for each and then fails (retryable)."""

    def __init__(self) -> None:
        self.failed: set[str] = set()
        self.calls = 0
        self.requests: list[ModelRequest] = []

    def __call__(self, req: ModelRequest) -> ModelReply:
        self.requests.append(req)
        last = req.messages[-1]
        if last.role == "user" and last.content.startswith("set "):
            body = last.content.removeprefix("set ")
            crash = body.endswith("!") and last.content not in self.failed
            pairs = [p.split("=") for p in body.rstrip("!").split(",") if p]
            calls = []
            for key, value in pairs:
                self.calls += 1
                args = {"key": key, "value": "CRASH" if crash else (None if value == "-" else value)}
                calls.append(ToolCall(id=f"c{self.calls}", name="set_state", arguments=json.dumps(args)))
            return ModelReply(text="", tool_calls=tuple(calls))
        if last.role == "tool":
            user = next(m for m in reversed(req.messages) if m.role == "user")
            if user.content.endswith("!") and user.content not in self.failed:
                self.failed.add(user.content)
                raise ModelError("crash after the tools ran", retryable=True)
        return ModelReply(text="ok")


STEPS = st.lists(
    st.tuples(
        st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from(["1", "2", "-"])), min_size=0, max_size=3),
        st.booleans(),  # the slice fails once after its tools ran
        st.booleans(),  # reopen the runtime after the step
    ),
    min_size=1,
    max_size=8,
)


async def scenario(url: str, steps: list[tuple[list[tuple[str, str]], bool, bool]]) -> None:
    script = Script()
    agent = Agent(name="a", model=ScriptedModel(script), subject=SubjectOptions(tsr_turns=3))
    expected: dict[str, tuple[str, int]] = {}
    rt = Runtime(url, [agent], settings=fast_settings(model_retries=5), memory_embedder=HashingEmbedder(32))
    await rt.open()
    try:
        for turn, (pairs, crash, reopen) in enumerate(steps, 1):
            body = ",".join(f"{k}={v}" for k, v in pairs)
            await rt.send("t", f"set {body}{'!' if crash else ''}", key=f"s{turn}", identity=IDENTITY)
            await rt.run_until_idle(timeout=30)
            for key, value in pairs:
                if value == "-":
                    expected.pop(key, None)
                else:
                    expected[key] = (value, turn)
            expected = {k: v for k, v in expected.items() if v[1] > turn - 3}
            got = (await rt.registers("t"))["short_term"]
            assert got == {k: v for k, (v, _) in expected.items()}, (turn, got, expected)
            assert "CRASH" not in json.dumps(await rt.state("t")), "a failed slice left state behind"
            # the thread row carries the state, equal to the replay (the next load reads it)
            assert (
                row_state_of(url.removeprefix("sqlite:///"), "t")
                == (await rt.store.journal.recover("t")).state
            )
            if reopen:
                await rt.close()
                rt = Runtime(
                    url, [agent], settings=fast_settings(model_retries=5), memory_embedder=HashingEmbedder(32)
                )
                await rt.open()
        # the next prompt shows exactly the register
        await rt.send("t", "and now?", key="last", identity=IDENTITY)
        await rt.run_until_idle(timeout=30)
        shown = script.requests[-1].summary or ""
        for key, (value, set_at) in expected.items():
            if set_at > len(steps) + 1 - 3:
                assert f'{key}: "{value}"' in shown
    finally:
        await rt.close()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS)
def test_the_register_is_the_replay_of_the_committed_journal_after_crashes(
    steps: list[tuple[list[tuple[str, str]], bool, bool]],
) -> None:
    with TemporaryDirectory() as tmp:
        asyncio.run(scenario(f"sqlite:///{Path(tmp) / 'd.db'}", steps))
