"""The records of a wait for a person: a call to approve or a question to answer as a
slice commits it (:class:`NewApproval`), and as it is stored and decided (:class:`Approval`)."""

from __future__ import annotations

from typing import Literal

import msgspec

ApprovalStatus = Literal["requested", "escalated", "approved", "edited", "denied", "expired", "answered"]
#: The statuses of a wait still open (someone may act on it).
OPEN_APPROVAL = ("requested", "escalated")


class NewApproval(msgspec.Struct, frozen=True, kw_only=True):
    """A call a person must approve (``kind`` ``approval``) or a question they must answer
    (``question``: ``ask_user``), committed with the slice instead of an outbox entry.
    ``deadline`` is a clock time (0: none); at it the wait expires, or escalates once to
    ``escalate_role`` for ``escalate_s`` more seconds when that is set."""

    call_id: str
    tool: str
    arguments: str
    kind: Literal["approval", "question"] = "approval"
    idempotent: bool = False
    role: str | None = None
    deadline: float = 0.0
    escalate_role: str | None = None
    escalate_s: float = 0.0


class Approval(msgspec.Struct, frozen=True, kw_only=True):
    """A stored wait for a person: its request and, once acted on, the decision.
    ``arguments`` are the model's; ``decided_arguments`` those that ran (an edit's)."""

    id: int
    thread_id: str
    tenant: str
    call_id: str
    kind: str
    tool: str
    arguments: str
    status: ApprovalStatus
    role: str | None = None
    deadline: float = 0.0
    escalate_role: str | None = None
    escalate_s: float = 0.0
    decision_key: str | None = None
    decided_by: str | None = None
    note: str | None = None
    decided_arguments: str | None = None
    requested_at: float = 0.0
    decided_at: float | None = None


__all__ = ["Approval", "ApprovalStatus", "NewApproval"]
