"""The waits-for-a-person events of a thread's event stream (:mod:`.streams`):
``approval_requested`` / ``question`` when a call or a question starts waiting,
``approval_decided`` / ``approval_expired`` when it stops. They are read from the store
(the thread's open waits, one bounded page) each time the stream wakes, so a stream sees
every wait that is open while it is connected; one decided while no stream was connected
shows in the history (its tool result) and in ``GET /v1/approvals?status=all``."""

from __future__ import annotations

from sse_starlette import ServerSentEvent

from ..errors import NotFound
from ..runtime import Runtime
from ..tenants.scope import Scope
from .approval_routes import ApprovalOut

#: Most open waits of one thread a stream follows (a page: a thread rarely has more than a few).
FOLLOWED = 100


async def wait_events(
    rt: Runtime, thread_id: str, tenant: str, seen: dict[str, str], after: int
) -> list[ServerSentEvent]:
    """Events for the thread's waits that opened or closed since ``seen`` (call id ->
    status of the open waits already announced), which is updated."""
    scope = Scope(tenant)
    page = await rt.pending(tenant=tenant, thread_id=thread_id, limit=FOLLOWED)
    events: list[ServerSentEvent] = []
    now_open = {a.call_id: a for a in page.items}
    for call_id in [c for c in seen if c not in now_open]:
        del seen[call_id]
        try:
            closed = await rt.approval(thread_id, call_id, tenant=tenant)
        except NotFound:
            continue
        name = "approval_expired" if closed.status == "expired" else "approval_decided"
        events.append(
            ServerSentEvent(data=ApprovalOut.of(closed, scope).model_dump_json(), event=name, id=str(after))
        )
    for call_id, wait in now_open.items():
        if seen.get(call_id) != wait.status:
            seen[call_id] = wait.status
            name = "question" if wait.kind == "question" else "approval_requested"
            events.append(
                ServerSentEvent(data=ApprovalOut.of(wait, scope).model_dump_json(), event=name, id=str(after))
            )
    return events
