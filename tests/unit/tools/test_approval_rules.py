"""The pure rules of waits for a person (dormant.approvals) and the tool options that set them."""

from __future__ import annotations

from typing import Any, cast

import pytest

from dormant.approvals import (
    check_answer,
    check_texts,
    decision_key,
    denied_text,
    edited_arguments,
    expired_text,
    request_for,
)
from dormant.errors import InvalidInput, UsageError
from dormant.records import Approval
from dormant.tools.builtins import ASK_USER_TOOL
from dormant.tools.spec import ApprovalPolicy, tool


@tool(needs_approval=True, approval=ApprovalPolicy(deadline_s=60, role="finance", escalate_to="cfo"))
def refund(amount: int) -> str:
    """Refund."""
    return "ok"


def wait(**fields: object) -> Approval:
    base: dict[str, object] = {"id": 1, "thread_id": "t", "tenant": "", "call_id": "c", "kind": "approval"}
    base.update({"tool": "refund", "arguments": "{}", "status": "requested"}, **fields)
    return Approval(**base)  # type: ignore[arg-type]


def test_a_request_carries_the_policy() -> None:
    req = request_for(refund, "c1", '{"amount": 5}', now=1000.0)
    assert (req.kind, req.deadline, req.role, req.escalate_role, req.escalate_s) == (
        "approval",
        1060.0,
        "finance",
        "cfo",
        60.0,
    )
    question = request_for(ASK_USER_TOOL, "q1", '{"question": "x"}', now=1000.0)
    assert (question.kind, question.deadline) == ("question", 0.0)


def test_bad_policies_are_refused() -> None:
    with pytest.raises(UsageError):
        ApprovalPolicy(deadline_s=-1)  # a deadline in the past
    with pytest.raises(UsageError):
        ApprovalPolicy(escalate_to="cfo")  # escalation needs a deadline
    with pytest.raises(UsageError):
        tool(needs_approval=cast(Any, "yes"))(lambda: "x")


def test_edits_answers_and_texts() -> None:
    assert edited_arguments(refund, {"amount": 3}) == '{"amount":3}'
    with pytest.raises(InvalidInput, match="schema"):
        edited_arguments(refund, {"amount": "lots"})
    with pytest.raises(InvalidInput):
        check_texts(note="x" * 10_000_000, by=None, key=None)
    with pytest.raises(InvalidInput):
        check_texts(note=None, by="a\x00b", key=None)
    question = wait(kind="question", tool="ask_user", arguments='{"question": "q", "choices": ["a", "b"]}')
    assert check_answer(question, "a") == "a"
    with pytest.raises(InvalidInput):
        check_answer(question, "c")
    with pytest.raises(InvalidInput):
        check_answer(question, "  ")
    assert "denied by ann: too much" in denied_text("refund", "ann", "too much")
    assert "not a denial" in expired_text(wait())
    assert decision_key("approved", "{}", None, None) == decision_key("approved", "{}", None, None)
    assert decision_key("approved", "{}", None, None) != decision_key("denied", None, None, None)
