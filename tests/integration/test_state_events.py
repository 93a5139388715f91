"""State-change events fan out P0 first (:mod:`dormant.memory.state_events`): a
long-term register change of a subject reaches the subject's other open threads as an
``event`` input of the key's priority class, admitted in the changing slice's commit;
with one slice at a time, the P0 events are consumed before P2 events admitted earlier.
Other subjects (the same phone on another device) and the changing thread itself get
nothing; a change is delivered once."""

from __future__ import annotations

import json
from itertools import count
from typing import cast

import pytest

from dormant import Agent, ModelReply, ModelRequest, Runtime, ScriptedModel, ToolCall
from dormant.errors import UsageError
from dormant.memory import HashingEmbedder
from dormant.memory.state_events import DEFAULT_PRIORITIES, events, priority_of
from dormant.records import Priority
from dormant.subject import SubjectOptions
from tests.integration.conftest import fast_settings

PHONE = "+1 555 0100"
N = 4
_ids = count()


class Script:
    """``profile KEY=VALUE`` -> set_state(KEY, VALUE, scope="subject"); anything else:
    "ok". Keeps (thread, last message) of every request."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def __call__(self, req: ModelRequest) -> ModelReply:
        last = req.messages[-1]
        self.seen.append((req.thread_id, last.content))
        if last.role == "user" and last.content.startswith("profile "):
            key, value = last.content.removeprefix("profile ").split("=", 1)
            args = {"key": key, "value": value, "scope": "subject"}
            call = ToolCall(id=f"c{next(_ids)}", name="set_state", arguments=json.dumps(args))
            return ModelReply(text="", tool_calls=(call,))
        return ModelReply(text="ok")


def test_a_keys_class_decides_its_priority() -> None:
    assert (
        priority_of("refund") == priority_of("refund_status") == priority_of("account_freeze") == Priority.P0
    )
    assert priority_of("coupon_code") == priority_of("order") == Priority.P1
    assert priority_of("browsing") == priority_of("browsing_history") == Priority.P2
    assert priority_of("refunded") == priority_of("mood") == Priority.P1, "no class: the default"
    custom = {"mood": Priority.P0, "mood_ring": Priority.P2}
    assert priority_of("mood_ring_color", custom) == Priority.P2, "the longest name wins"
    made = events([("refund", '"x"'), ("refund", '"y"')], source="s", commit=7, targets=["a", "b"])
    assert [(e.thread_id, e.dedup_key, e.priority) for e in made] == [
        ("a", "state:s:7:refund", Priority.P0),
        ("b", "state:s:7:refund", Priority.P0),
    ]
    assert '"y"' in made[0].content, "the last change of a key wins"
    assert DEFAULT_PRIORITIES["browsing"] == Priority.P2
    assert SubjectOptions(priorities={"mood": Priority.P0}).priorities == {"mood": Priority.P0}
    with pytest.raises(UsageError):
        SubjectOptions(priorities={"mood": cast(Priority, 7)})


async def test_p0_state_changes_reach_the_subjects_threads_before_p2_ones(store_url: str) -> None:
    script = Script()
    agent = Agent(name="a", model=ScriptedModel(script), subject=SubjectOptions())
    async with Runtime(
        store_url, [agent], settings=fast_settings(concurrency=1), memory_embedder=HashingEmbedder(32)
    ) as rt:
        # two subjects, each with N open threads besides the one that changes its profile;
        # a third subject shares the first one's phone on another device
        for device, prefix in (("d1", "a"), ("d2", "b"), ("d3", "c")):
            for n in range(N + 1):
                await rt.send(f"{prefix}{n}", "hello", identity={"phone": PHONE, "device": device})
        await rt.run_until_idle(timeout=30)
        script.seen.clear()
        # a P2 change first, then a P0 change of the other subject
        await rt.send("a0", "profile browsing=shoes", identity={"phone": PHONE, "device": "d1"})
        await rt.send("b0", "profile refund_status=pending", identity={"phone": PHONE, "device": "d2"})
        await rt.run_until_idle(timeout=30)
        delivered = [(thread, text) for thread, text in script.seen if text.startswith("[event]")]
        order = [thread for thread, _ in delivered]
        assert sorted(order) == sorted(
            [f"a{n}" for n in range(1, N + 1)] + [f"b{n}" for n in range(1, N + 1)]
        )
        assert {t[0] for t in order[:N]} == {"b"}, f"the P0 events first: {order}"
        assert all("refund_status" in text for thread, text in delivered if thread.startswith("b"))
        assert all("browsing" in text for thread, text in delivered if thread.startswith("a"))
        assert not any(thread.startswith("c") for thread, _ in script.seen), "another subject hears nothing"
        assert "a0" not in order and "b0" not in order, "the changing thread is not told"
        # the long-term register holds the change; the next slice shows it
        assert (await rt.registers("a3"))["long_term"] == {"browsing": "shoes"}
