"""ScriptedModel: a deterministic, in-process model that implements :class:`Model`.

It is a real model as far as the runtime can tell (it streams text and tool call
pieces), so tests and benchmarks exercise the same path as a remote model.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable

from ..records import ToolCall
from ..tokens import DEFAULT_ENCODING
from .base import (
    OPENAI_CHAT,
    Finish,
    ModelEvent,
    ModelReply,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    check_limits,
    last_is_tool_result,
)

Script = Callable[[ModelRequest], ModelReply]


class ScriptedModel:
    """A model whose reply to each request is computed by ``script``.

    Replies are streamed in ``chunk``-sized text pieces and tool-call pieces (after the
    reply's reasoning, if any; then its finish reason and usage, if set). The
    declared budget (``context_window``, ``max_output_tokens``, ``encoding``) is what
    the runtime fits prompts to; the script itself is not held to it.
    ``max_output_tokens`` defaults to 4,096 (half the window if that is smaller).
    Raises :class:`~dormant.errors.UsageError` for an impossible budget or an unknown
    encoding.
    """

    #: prompts are budgeted as for an OpenAI-style chat server (see :class:`~.base.ChatOverhead`)
    chat_overhead = OPENAI_CHAT

    def __init__(
        self,
        script: Script,
        *,
        name: str = "scripted",
        context_window: int = 128_000,
        max_output_tokens: int | None = None,
        encoding: str = DEFAULT_ENCODING,
        chunk: int = 4096,
    ) -> None:
        self.script = script
        self.name = name
        self.context_window, self.max_output_tokens, self.encoding = check_limits(
            context_window, max_output_tokens, encoding
        )
        self.chunk = chunk

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream the scripted reply."""
        reply = self.script(request)
        if reply.reasoning:
            yield ReasoningDelta(text=reply.reasoning)
        text = reply.text
        for start in range(0, len(text), self.chunk):
            yield TextDelta(text=text[start : start + self.chunk])
        for index, call in enumerate(reply.tool_calls):
            yield ToolCallDelta(index=index, id=call.id, name=call.name, arguments=call.arguments)
        if reply.finish_reason is not None or reply.usage is not None:
            yield Finish(reason=reply.finish_reason, usage=reply.usage)


def echo_script(request: ModelRequest) -> ModelReply:
    """Reply with the newest user text, prefixed by ``echo:``."""
    for message in reversed(request.messages):
        if message.role == "user":
            return ModelReply(text=f"echo: {message.content}")
    return ModelReply(text="echo: (nothing)")


def tool_round_trip(tool: str, arguments: dict[str, object], text: str, *, repeat: int = 1) -> Script:
    """A script that calls ``tool`` once per turn, then answers with ``text * repeat``.

    When the newest message is not a tool result it replies with the text and one
    tool call (fresh random id, 32 hex digits); after a tool result it replies with text only,
    which ends the turn. This is the agent_scale workload's model.
    """
    body = text * repeat
    args = json.dumps(arguments)

    def script(request: ModelRequest) -> ModelReply:
        if last_is_tool_result(request.messages):
            return ModelReply(text=body)
        call = ToolCall(id=f"call_{os.urandom(16).hex()}", name=tool, arguments=args)
        return ModelReply(text=body, tool_calls=(call,))

    return script


def echo_model() -> ScriptedModel:
    """A ScriptedModel running :func:`echo_script`."""
    return ScriptedModel(echo_script, name="scripted-echo")
