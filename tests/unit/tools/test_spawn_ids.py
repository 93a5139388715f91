"""Ids the built-in tools make stay within the store's limits."""

from __future__ import annotations

from dormant.inbox import MAX_DEDUP_KEY_BYTES, MAX_THREAD_ID_BYTES
from dormant.tools.builtins import bounded, child_id, spawn_thread
from dormant.tools.spec import ToolContext


def test_a_short_child_id_is_parent_slash_call() -> None:
    assert child_id("boss", "call_1") == "boss/call_1"


def test_a_long_child_id_is_hashed_down_deterministically_and_distinctly() -> None:
    parent = "é" * 127  # 254 bytes
    a, b = child_id(parent, "call_a"), child_id(parent, "call_b")
    assert a != b and a == child_id(parent, "call_a")
    for child in (a, b, child_id("x" * 256, "y" * 1000)):
        assert len(child.encode()) <= MAX_THREAD_ID_BYTES
        child.encode()  # the head was cut on a character boundary


def test_bounded_keeps_what_fits() -> None:
    assert bounded("k" * 10, 10) == "k" * 10
    assert len(bounded("k" * 11, 40).encode()) <= 40


def test_spawn_keys_stay_within_the_dedup_key_limit() -> None:
    ctx = ToolContext(thread_id="p" * 256, call_id="c" * 600, agent="a", message_seq=2)
    text = spawn_thread("task", ctx)
    (thread,) = ctx.threads
    (admission,) = ctx.admissions
    assert text.startswith(f"spawned thread {thread.id}")
    assert len(thread.id.encode()) <= MAX_THREAD_ID_BYTES
    assert admission.thread_id == thread.id
    assert len(admission.dedup_key.encode()) <= MAX_DEDUP_KEY_BYTES
