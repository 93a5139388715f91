"""Waits for a person over REST: list, decide (200, 404 for another tenant, 409 with the
first decision, 422 for a bad edit), answer a question."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai

from dormant.agent import Agent
from dormant.models.base import ModelReply, ModelRequest
from dormant.models.scripted import ScriptedModel
from dormant.records import ToolCall
from dormant.tools.builtins import ASK_USER_TOOL
from dormant.tools.spec import tool
from tests.helpers import eventually
from tests.server.support import events, serve
from tests.server.test_events import collect

RUNS: list[int] = []


@tool(mode="async", needs_approval=True)
async def refund(amount: int) -> str:
    """Refund an amount."""
    RUNS.append(amount)
    return f"refunded {amount}"


def script(req: ModelRequest) -> ModelReply:
    last = req.messages[-1]
    if last.role == "user" and last.content == "ask":
        args = json.dumps({"question": "which?", "choices": ["red", "blue"]})
        return ModelReply(text="", tool_calls=(ToolCall(id="q", name="ask_user", arguments=args),))
    if last.role == "user" and last.content.isdigit():
        args = json.dumps({"amount": int(last.content)})
        return ModelReply(text="", tool_calls=(ToolCall(id="r", name="refund", arguments=args),))
    return ModelReply(text="saw " + last.content)


def agents() -> list[Agent]:
    return [Agent(name="a", model=ScriptedModel(script), tools=[refund, ASK_USER_TOOL])]


async def open_waits(h: httpx.AsyncClient, n: int) -> list[dict[str, Any]]:
    async def listed() -> bool:
        return len((await h.get("/v1/approvals")).json()["items"]) == n

    await eventually(listed)
    return list((await h.get("/v1/approvals")).json()["items"])


async def send(h: httpx.AsyncClient, thread: str, text: str) -> None:
    r = await h.post(f"/v1/threads/{thread}/inputs", json={"content": text, "agent": "a"})
    assert r.status_code == 202, r.text


async def last_reply(h: httpx.AsyncClient, thread: str) -> str:
    items = (await h.get(f"/v1/threads/{thread}/messages?limit=50")).json()["items"]
    return str([m for m in items if m["role"] == "assistant"][-1]["content"])


async def test_decide_over_rest() -> None:
    RUNS.clear()
    async with serve(agents()) as s, s.client() as h, s.client(s.key_b) as other:
        await send(h, "t1", "500")
        (wait,) = await open_waits(h, 1)
        assert (wait["thread_id"], wait["tool"], wait["status"], wait["deadline"]) == (
            "t1",
            "refund",
            "requested",
            None,
        )
        url = f"/v1/threads/t1/approvals/{wait['call_id']}"
        assert (await other.get("/v1/approvals")).json()["items"] == []
        assert (await other.post(url, json={"action": "approve"})).status_code == 404
        bad = await h.post(url, json={"action": "edit", "args": {"amount": "many"}})
        assert bad.status_code == 422 and "schema" in bad.json()["error"]["message"]
        assert (await h.post(url, json={"action": "approve", "note": "x" * 5000})).status_code == 422
        ok = await h.post(url, json={"action": "edit", "args": {"amount": 90}, "by": "ann", "key": "d1"})
        assert ok.status_code == 200 and ok.json()["status"] == "edited"
        again = await h.post(url, json={"action": "edit", "args": {"amount": 90}, "by": "ann", "key": "d1"})
        assert again.status_code == 200
        clash = await h.post(url, json={"action": "deny", "by": "bob"})
        assert clash.status_code == 409 and clash.json()["first"]["decided_by"] == "ann"

        async def replied() -> bool:
            return await last_reply(h, "t1") == "saw refunded 90"

        await eventually(replied)
        assert RUNS == [90]
        history = (await h.get("/v1/approvals?status=all")).json()["items"]
        assert [a["status"] for a in history] == ["edited"]
        assert (await h.get("/v1/threads/t1/approvals/nope")).status_code == 404


async def test_answer_over_rest() -> None:
    async with serve(agents()) as s, s.client() as h:
        await send(h, "t2", "ask")
        (question,) = await open_waits(h, 1)
        assert (question["kind"], question["question"], question["choices"]) == (
            "question",
            "which?",
            ["red", "blue"],
        )
        url = f"/v1/threads/t2/answers/{question['call_id']}"
        assert (await h.post(url, json={"text": "green"})).status_code == 422
        # while it waits no slice runs: even strategy=reject queues an input behind the answer
        r = await h.post("/v1/threads/t2/inputs", json={"content": "meanwhile", "strategy": "reject"})
        assert r.status_code == 202 and (await h.get("/v1/threads/t2")).json()["awaiting"] == 1
        assert (await h.post(url, json={"text": "red", "by": "ann"})).status_code == 200

        async def replied() -> bool:  # the answer's slice, then the queued input's
            items = (await h.get("/v1/threads/t2/messages?limit=50")).json()["items"]
            said = [m["content"] for m in items if m["role"] == "assistant" and m["content"]]
            return said == ["saw red", "saw meanwhile"]

        await eventually(replied)


async def test_the_event_stream_tells_of_waits_opening_and_closing() -> None:
    kinds = {"approval_requested", "approval_decided", "question"}
    async with serve(agents()) as s, s.client() as h:
        await h.post("/v1/threads", json={"id": "t3", "agent": "a"})
        async with h.stream("GET", "/v1/threads/t3/events") as r:
            stream = events(r)
            await send(h, "t3", "500")
            (requested,) = await collect(stream, 1, kinds)
            assert requested.event == "approval_requested"
            call_id = json.loads(requested.data)["call_id"]
            await h.post(f"/v1/threads/t3/approvals/{call_id}", json={"action": "deny", "by": "ann"})
            (decided,) = await collect(stream, 1, kinds)
            assert decided.event == "approval_decided" and json.loads(decided.data)["status"] == "denied"
            await send(h, "t3", "ask")
            (question,) = await collect(stream, 1, kinds)
            assert question.event == "question" and json.loads(question.data)["choices"] == ["red", "blue"]


async def test_the_openai_facade_ends_a_turn_at_a_wait_and_the_next_message_answers() -> None:
    RUNS.clear()
    async with serve(agents()) as s:
        c = openai.AsyncOpenAI(base_url=s.url + "/v1", api_key=s.key_a, max_retries=0)
        messages: list[Any] = [{"role": "user", "content": "ask"}]
        asked = await c.chat.completions.create(model="a", user="alice", messages=messages)
        text = asked.choices[0].message.content or ""
        assert asked.choices[0].finish_reason == "stop" and "which?" in text and "red, blue" in text
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "blue"}]
        answered = await c.chat.completions.create(model="a", user="alice", messages=messages)
        assert answered.choices[0].message.content == "saw blue"
        again = await c.chat.completions.create(model="a", user="alice", messages=messages)  # a retry
        assert again.choices[0].message.content == "saw blue"
        async with s.client() as h:
            history = (await h.get("/v1/approvals?status=all")).json()["items"]
            assert [(a["tool"], a["status"], a["note"]) for a in history] == [
                ("ask_user", "answered", "blue")
            ]
        refund_turn: list[Any] = [{"role": "user", "content": "500"}]
        held = await c.chat.completions.create(model="a", user="bob", messages=refund_turn)
        assert "Waiting for a person to approve refund" in (held.choices[0].message.content or "")
        assert RUNS == []
