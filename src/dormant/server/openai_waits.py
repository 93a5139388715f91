"""Waits for a person on the OpenAI-compatible endpoints (used by :mod:`.turns`).

* A turn that reaches a call waiting for approval, or an ``ask_user`` question, ends
  there: the answer is an assistant message saying what waits (``finish_reason``
  ``stop``), not stored, made from the wait's row.
* The newest user message of a request to a thread with an open question answers it
  (:meth:`Runtime.answer`, checked against its choices; the message's dedup key is the
  answer's key, so a retried request answers once) instead of being admitted as an input.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..approvals import question_of
from ..records import Approval, Message, NewInput
from ..runtime import Runtime

#: Most open waits of one thread looked at.
PAGE = 20


async def answer_questions(
    rt: Runtime, thread_id: str, items: Sequence[NewInput], *, tenant: str
) -> tuple[list[NewInput], set[str], set[str]]:
    """Answer the thread's open questions with its first user items: the items left to
    admit, the question ids answered now, and those an earlier try of this request answered."""
    items = list(items)
    if not any(i.kind == "user" for i in items):
        return items, set(), set()
    answered: set[str] = set()
    before: set[str] = set()
    done = await rt.pending(
        tenant=tenant, thread_id=thread_id, tool="ask_user", status="answered", limit=PAGE
    )
    keys = {a.decision_key: a.call_id for a in done.items}
    for item in [i for i in items if i.kind == "user" and i.dedup_key in keys]:
        before.add(keys[item.dedup_key])  # a retried request: answered already
        items.remove(item)
    opened = await rt.pending(tenant=tenant, thread_id=thread_id, tool="ask_user", limit=1)
    users = [i for i in items if i.kind == "user"]
    if opened.items and users:
        # the newest user message answers (the earlier ones of a whole conversation sent
        # again are admitted as before: duplicates of what the thread has)
        user, question = users[-1], opened.items[0]
        await rt.answer(thread_id, question.call_id, user.content, key=user.dedup_key, tenant=tenant)
        answered.add(question.call_id)
        items.remove(user)
    return items, answered, before


def waiting_text(wait: Approval) -> str:
    """What the turn's last assistant message says of a wait."""
    if wait.kind == "question":
        question, choices = question_of(wait)
        options = f" (answer one of: {', '.join(choices)})" if choices else ""
        return f"{question}{options}"
    return (
        f"Waiting for a person to approve {wait.tool}({wait.arguments}) (call {wait.call_id}): "
        f"POST /v1/threads/{{thread}}/approvals/{wait.call_id} with approve, edit or deny."
    )


async def waits_of_turn(
    rt: Runtime, thread_id: str, turn: Sequence[Message], *, tenant: str
) -> Message | None:
    """A message ending the turn when a call of its newest tool-calling assistant message
    waits for a person; None otherwise (the turn goes on)."""
    last = next((m for m in reversed(turn) if m.role == "assistant" and m.tool_calls), None)
    if last is None:
        return None
    ids = {c.id for c in last.tool_calls}
    answered = {m.tool_call_id for m in turn if m.role == "tool"}
    page = await rt.pending(tenant=tenant, thread_id=thread_id, limit=PAGE)
    waits = [w for w in page.items if w.call_id in ids and w.call_id not in answered]
    if not waits:
        return None
    text = "\n".join(waiting_text(w) for w in waits)
    if any(w.kind == "approval" for w in waits):
        text += "\n" + json.dumps({"waiting": [w.call_id for w in waits]})
    return Message(seq=last.seq, role="assistant", content=text, created_at=last.created_at)
