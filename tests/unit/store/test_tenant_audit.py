"""Audit: every store-core and runtime entry point that names a thread takes the tenant.

Tenant scope is enforced by the store core (``tenant=``), so a new entry point that
names a thread but cannot be scoped would be a hole; this test lists them all.
"""

from __future__ import annotations

import inspect

import pytest

from dormant.runtime import Runtime
from dormant.store.base import Store
from dormant.store.core import StoreCore

#: Parameters by which an operation names a thread (or inputs to threads).
NAMING = {"thread_id", "items"}
#: Entry points that name a thread and take no tenant, each with the reason.
UNSCOPED = {
    ("Runtime", "send"): "the library's convenience; the server admits through admit(tenant=)",
    ("Runtime", "interrupt"): "a slice running here; the server calls it after a scoped admit",
    ("Runtime", "state"): "the state journal: library and operator reads, no server route",
    ("Runtime", "checkpoint"): "retention (dormant gc, the governor's warn hook): operator only",
    ("StoreCore", "shrink_tool_results"): "retention (dormant gc): operator only, no server route",
    ("Store", "shrink_tool_results"): "retention (dormant gc): operator only, no server route",
    ("StoreCore", "prune_history"): "retention (dormant gc): operator only, no server route",
    ("StoreCore", "demote_parts"): "retention (dormant gc): operator only, no server route",
    ("Store", "demote_parts"): "retention (dormant gc): operator only, no server route",
    ("Store", "prune_history"): "retention (dormant gc): operator only, no server route",
    ("StoreCore", "prune_summaries"): "retention (dormant gc): operator only, no server route",
    ("Store", "prune_summaries"): "retention (dormant gc): operator only, no server route",
    ("Runtime", "fork"): "time travel: the library's, no server route yet (it must take the tenant then)",
    ("Runtime", "rewind"): "time travel: the library's, no server route yet (it must take the tenant then)",
    ("Runtime", "memory_for"): "the memory of the thread's own tenant (read from its id): library only",
    (
        "Runtime",
        "registers",
    ): "memory in the loop: library reads, no server route yet (it must take the tenant then)",
    (
        "Runtime",
        "rebind",
    ): "memory in the loop: library only, no server route yet (it must take the tenant then)",
}


def entry_points(cls: type) -> list[tuple[str, inspect.Signature]]:
    return [
        (name, inspect.signature(member))
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    ]


@pytest.mark.parametrize("cls", [StoreCore, Store, Runtime], ids=lambda c: c.__name__)
def test_every_entry_point_that_names_a_thread_takes_the_tenant(cls: type) -> None:
    checked = []
    for name, sig in entry_points(cls):
        if not NAMING & set(sig.parameters) or (cls.__name__, name) in UNSCOPED:
            continue
        param = sig.parameters.get("tenant")
        assert param is not None, f"{cls.__name__}.{name} names a thread but takes no tenant"
        assert param.kind is inspect.Parameter.KEYWORD_ONLY and param.default is None
        checked.append(name)
    assert len(checked) >= 6  # the audit found the operations (it is not vacuous)


def test_store_core_and_protocol_agree_on_which_operations_are_scoped() -> None:
    def scoped(cls: type) -> set[str]:
        return {name for name, sig in entry_points(cls) if "tenant" in sig.parameters}

    assert scoped(StoreCore) == scoped(Store)
    assert {"admit", "history", "get_blob", "read_blob", "put_blob", "list_threads", "status"} <= scoped(
        StoreCore
    )
