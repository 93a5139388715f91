"""Model adapters: the :class:`Model` interface, the scripted model, OpenAI-compatible HTTP.

May import: the root's vocabulary only (``errors``, ``records``, ``tokens``)."""

from .base import (
    Finish,
    Model,
    ModelEvent,
    ModelReply,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
    collect,
)
from .scripted import ScriptedModel, echo_model, echo_script, tool_round_trip

__all__ = [
    "Finish",
    "Model",
    "ModelEvent",
    "ModelReply",
    "ModelRequest",
    "ReasoningDelta",
    "ScriptedModel",
    "TextDelta",
    "ToolCallDelta",
    "Usage",
    "collect",
    "echo_model",
    "echo_script",
    "tool_round_trip",
]
