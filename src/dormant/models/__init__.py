"""Model adapters: the :class:`Model` interface, the scripted model, OpenAI-compatible HTTP."""

from .base import Model, ModelEvent, ModelReply, ModelRequest, TextDelta, ToolCallDelta, collect
from .scripted import ScriptedModel, echo_model, echo_script, tool_round_trip

__all__ = [
    "Model",
    "ModelEvent",
    "ModelReply",
    "ModelRequest",
    "ScriptedModel",
    "TextDelta",
    "ToolCallDelta",
    "collect",
    "echo_model",
    "echo_script",
    "tool_round_trip",
]
