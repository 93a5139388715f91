"""`dormant doctor` on SQLite counts a call waiting for a person's decision as something a
waiting thread will receive (as on PostgreSQL): a thread waiting for an approval is not
"stalled"; one whose wait no call, approval or result will end still is."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from dormant.ops.doctor import diagnose
from dormant.records import CommitPlan, Message, NewApproval, NewInput, ToolCall, ViewLimits
from dormant.store import open_store


async def test_a_thread_waiting_for_an_approval_is_not_stalled(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    store = open_store(f"sqlite:///{path}")
    await store.open()
    try:
        await store.admit([NewInput(thread_id="t", kind="user", dedup_key="k", content="hi", agent="a")])
        (claim,) = await store.claim_threads("w", 1, 30.0)
        load = await store.load_slice(claim, ViewLimits())
        call = ToolCall(id="c1", name="charge", arguments="{}")
        await store.commit_slice(
            CommitPlan(
                thread_id="t",
                token=claim.token,
                consumed=(load.inputs[0].id,),
                messages=(
                    Message(seq=1, role="user", content="hi", input_id=load.inputs[0].id),
                    Message(seq=2, role="assistant", content="", tool_calls=(call,)),
                ),
                approvals=(NewApproval(call_id="c1", tool="charge", arguments="{}"),),
                awaiting=1,
            )
        )
    finally:
        await store.close()

    def waiting() -> str | None:  # the finding is there only when a thread is stalled
        found = {f.check: f.level for f in diagnose(f"sqlite:///{path}").findings}
        assert "threads" in found, found  # the doctor did examine the store
        return found.get("waiting threads")

    assert waiting() is None  # the person's decision will end the wait
    with sqlite3.connect(path) as conn:  # the approval gone behind the store's back
        conn.execute("DELETE FROM approvals")
    assert waiting() == "fail"
