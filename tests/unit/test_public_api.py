"""The public API is exactly what ``dormant.__all__`` lists."""

from __future__ import annotations

import dormant

PUBLIC = [
    "Admission",
    "Agent",
    "DormantError",
    "InvalidInput",
    "LeaseLost",
    "Message",
    "Model",
    "ModelError",
    "ModelReply",
    "ModelRequest",
    "NewInput",
    "NotFound",
    "Overloaded",
    "Page",
    "Priority",
    "Runtime",
    "SchemaError",
    "ScriptedModel",
    "Settings",
    "Store",
    "StoreError",
    "StoreFull",
    "StoreLocked",
    "Thread",
    "ToolCall",
    "ToolContext",
    "ToolError",
    "ToolSpec",
    "UsageError",
    "open_store",
    "tool",
]


def test_all_is_pinned() -> None:
    """Changing the public API is a decision: update this list on purpose."""
    assert sorted(dormant.__all__) == PUBLIC
    assert len(dormant.__all__) == len(set(dormant.__all__))


def test_every_public_name_exists_and_is_documented() -> None:
    for name in dormant.__all__:
        obj = getattr(dormant, name)
        assert obj is not None
        if callable(obj):
            assert (getattr(obj, "__doc__", None) or "").strip(), f"{name} has no docstring"


def test_version_is_a_string() -> None:
    assert isinstance(dormant.__version__, str) and dormant.__version__
