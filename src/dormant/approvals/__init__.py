"""Waits for a person: the pure rules of approvals and ``ask_user`` questions.

A call of a tool whose :class:`~dormant.tools.spec.ApprovalPolicy` says so, and every
``ask_user`` call, is committed by its slice as a wait (an ``approvals`` row), not as an
outbox entry; the thread waits with no RAM, like for any async call. A decision is an
action on that row in one transaction (see :class:`~dormant.store.core_approvals.ApprovalRules`):
approve or edit puts the call in the outbox, exactly once; deny, expiry and an answer
admit the tool result the model sees, whose texts are made here.

This package decides (no I/O): whether a call needs approval (:func:`request_for`), what
a decision stores (:func:`validate_decision`), the texts the model sees. It imports the
vocabulary and :mod:`dormant.tools` only.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from ..errors import InvalidInput
from ..records import Approval, NewApproval
from ..tools.spec import ToolContext, ToolSpec

#: The actions a person takes on an approval (``answer`` is for questions).
Action = Literal["approve", "deny", "edit"]
ACTIONS: dict[str, str] = {"approve": "approved", "deny": "denied", "edit": "edited"}
#: Longest note, decider name, role and decision key accepted (characters).
MAX_NOTE = 4_000
MAX_NAME = 200
#: Longest answer to a question (characters).
MAX_ANSWER = 16_000
#: The built-in question tool's name.
ASK_USER = "ask_user"


def needs_approval(spec: ToolSpec, args: dict[str, Any], ctx: ToolContext) -> bool:
    """Whether this call of ``spec`` waits for a person: its policy's verdict; a policy
    that raises asks (a broken rule must not let a call through)."""
    policy = spec.approval
    if policy is None:
        return False
    if isinstance(policy.needs, bool):
        return policy.needs
    try:
        return bool(policy.needs(args, ctx))
    except Exception:
        return True


def request_for(spec: ToolSpec, call_id: str, arguments: str, now: float) -> NewApproval:
    """The wait a call of ``spec`` (which needs approval, or is ``ask_user``) commits."""
    if spec.name == ASK_USER:
        return NewApproval(call_id=call_id, tool=spec.name, arguments=arguments, kind="question")
    policy = spec.approval
    assert policy is not None
    deadline = now + policy.deadline_s if policy.deadline_s is not None else 0.0
    escalate_s = policy.escalate_s or policy.deadline_s or 0.0
    return NewApproval(
        call_id=call_id,
        tool=spec.name,
        arguments=arguments,
        idempotent=spec.idempotent,
        role=policy.role,
        deadline=deadline,
        escalate_role=policy.escalate_to,
        escalate_s=escalate_s if policy.escalate_to else 0.0,
    )


def _text(value: str | None, what: str, limit: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{what} is text")
    if len(value) > limit:
        raise InvalidInput(f"{what} is at most {limit} characters, not {len(value)}")
    if "\x00" in value:
        raise InvalidInput(f"{what} contains a NUL character (\\x00)")
    return value


def check_texts(*, note: str | None, by: str | None, key: str | None, role: str | None = None) -> None:
    """InvalidInput for a note, decider, key or role too long or not storable."""
    _text(note, "a decision's note", MAX_NOTE)
    _text(by, "a decider's name", MAX_NAME)
    _text(key, "a decision key", MAX_NAME)
    _text(role, "a decider's role", MAX_NAME)


def decision_key(status: str, arguments: str | None, by: str | None, note: str | None) -> str:
    """The key of a decision given without one: the same decision makes the same key
    (a retry is idempotent), a different one another (a conflict)."""
    digest = hashlib.sha256(json.dumps([status, arguments, by, note]).encode()).hexdigest()
    return f"auto:{digest[:32]}"


def edited_arguments(spec: ToolSpec | None, args: object) -> str:
    """An edit's arguments as JSON text, validated against the tool's schema
    (InvalidInput, naming the problem, when they break it)."""
    if not isinstance(args, dict):
        raise InvalidInput("edited arguments are a JSON object")
    text = json.dumps(args, separators=(",", ":"), ensure_ascii=False)
    _text(text, "edited arguments", 256 * 1024)
    if spec is not None:
        try:
            spec.parse(text)
        except ValueError as exc:
            raise InvalidInput(f"the edited arguments break the schema of {spec.name!r}: {exc}") from None
    return text


def denied_text(tool: str, by: str | None, note: str | None) -> str:
    """The tool result the model sees for a denied call."""
    who = by or "a person"
    why = f": {note}" if note else " (no reason given)"
    return f"error: the call of {tool!r} was denied by {who}{why}. It did not run."


def expired_text(approval: Approval) -> str:
    """The tool result the model sees when a wait expired (nobody decided)."""
    if approval.kind == "question":
        return "error: the question expired unanswered; no person replied in time."
    return (
        f"error: the call of {approval.tool!r} expired waiting for approval; nobody decided in time. "
        "It did not run (this is not a denial)."
    )


def question_of(approval: Approval) -> tuple[str, list[str] | None]:
    """A question wait's text and choices (None: free text)."""
    try:
        args = json.loads(approval.arguments or "{}")
    except json.JSONDecodeError:
        args = {}
    question = str(args.get("question", "")) if isinstance(args, dict) else ""
    raw = args.get("choices") if isinstance(args, dict) else None
    choices = [str(c) for c in raw] if isinstance(raw, list) and raw else None
    return question, choices


def check_answer(approval: Approval, text: object) -> str:
    """An answer to a question wait, validated: text, one of its choices when it has some."""
    answer = _text(text if isinstance(text, str) else None, "an answer", MAX_ANSWER)
    if answer is None or not answer.strip():
        raise InvalidInput("an answer is non-empty text")
    _, choices = question_of(approval)
    if choices is not None and answer not in choices:
        raise InvalidInput(f"the answer must be one of {choices}, not {answer[:200]!r}")
    return answer


__all__ = [
    "ACTIONS",
    "ASK_USER",
    "MAX_NOTE",
    "Action",
    "check_answer",
    "check_texts",
    "decision_key",
    "denied_text",
    "edited_arguments",
    "expired_text",
    "needs_approval",
    "question_of",
    "request_for",
]
