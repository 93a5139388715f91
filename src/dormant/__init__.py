"""dormant: very many long-lived LLM agent sessions, memory bounded by work in flight.

The public API is what this module lists in ``__all__`` (a test pins it).
"""

from .agent import Agent
from .config import Settings
from .errors import (
    DormantError,
    InvalidInput,
    LeaseLost,
    ModelError,
    NotFound,
    Overloaded,
    SchemaError,
    StoreError,
    StoreFull,
    StoreLocked,
    ToolError,
    UsageError,
)
from .models import Model, ModelReply, ModelRequest, ScriptedModel
from .records import Admission, Message, NewInput, Page, Priority, Thread, ToolCall
from .runtime import Runtime
from .store import Store, open_store
from .tools.spec import ToolContext, ToolSpec, tool

__version__ = "0.1.0"

__all__ = [
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
