"""A thread's timeline on the dashboard: messages newest first, the compaction summary
where it was written."""

from __future__ import annotations

from dormant.agent import Agent
from dormant.models.base import ModelReply
from dormant.models.scripted import ScriptedModel
from dormant.runtime import Runtime
from dormant.server.ui import data
from tests.contract.support import plan, take, turn, user
from tests.contract.test_summaries import summary_of


async def test_the_summary_sits_where_it_was_written_on_the_page_that_holds_it() -> None:
    rt = Runtime("memory://", [Agent(name="a", model=ScriptedModel(lambda r: ModelReply(text="ok")))])
    await rt.open()
    try:
        store = rt.store
        await turn(store, "t1", "k1", extra=4)  # seqs 1..6
        await store.admit([user("t1", "k2")])
        c, load = await take(store, "t1")
        await store.commit_slice(plan(c, load, summary=summary_of(load, 4, "the <story> so far")))  # 7, 8
        tl = await data.timeline(rt, "t1", tenant=None, cursor=None)
        kinds = [(item.kind, item.seq) for item in tl.items]
        assert kinds.index(("summary", 6)) == [seq for _, seq in kinds].index(6)  # before message 6
        (summary,) = [item for item in tl.items if item.kind == "summary"]
        assert summary.text == "the <story> so far" and "up to #4" in (summary.meta or "")
        assert [item.seq for item in tl.items if item.kind != "summary"] == sorted(
            (item.seq for item in tl.items if item.kind != "summary"), reverse=True
        )
        older = await data.timeline(rt, "t1", tenant=None, cursor="3")  # messages 1, 2: no summary
        assert older.items and all(item.kind != "summary" for item in older.items)
    finally:
        await rt.close()


def test_waits_sit_above_their_calls_and_open_ones_off_the_page_go_on_top_of_the_newest() -> None:
    from dormant.records import Approval, ApprovalStatus

    def wait(call: str, status: ApprovalStatus) -> Approval:
        return Approval(
            id=1,
            thread_id="t",
            tenant="",
            call_id=call,
            kind="approval",
            tool="pay",
            arguments="{}",
            status=status,
        )

    items = [
        data.Item("result", 9, 0.0, "ok", call_id="c2"),
        data.Item("call", 8, 0.0, "{}", name="pay", call_id="c2"),
        data.Item("input", 7, 0.0, "hi"),
    ]
    waits = {"c2": wait("c2", "approved"), "c0": wait("c0", "requested"), "c1": wait("c1", "denied")}
    shown = [(i.kind, i.call_id) for i in data.with_waits(items, waits, newest=True)]
    assert shown == [
        ("approval", "c0"),
        ("result", "c2"),
        ("approval", "c2"),
        ("call", "c2"),
        ("input", None),
    ]
    older = [(i.kind, i.call_id) for i in data.with_waits(items, waits)]
    assert ("approval", "c0") not in older and ("approval", "c2") in older


def test_a_thumbnail_keeps_its_aspect_within_240_px_and_a_small_image_its_size() -> None:
    from dormant.records import Part

    def image(w: int, h: int) -> Part:
        return Part(kind="image", ref="sha256:" + "0" * 64, media_type="image/png", size=1, width=w, height=h)

    assert data.thumb_size(image(300, 1200)) == (60, 240)
    assert data.thumb_size(image(40, 30)) == (40, 30)
    assert data.thumb_size(image(0, 0)) == (240, 240)
    assert [data.size_text(n) for n in (812, 4300, 3 * 1024 * 1024)] == ["812 B", "4.2 KiB", "3.0 MiB"]
