"""Tools: what an agent may call, and where large outputs go.

Owns ``@tool``, :class:`ToolSpec` and :class:`ToolContext` (:mod:`.spec`), the
bounded pool of OS threads that synchronous tools run in (:mod:`.pool`), the
built-in tools (:mod:`.builtins`: child threads, durable timers, reading stored
outputs), blobs (:mod:`.blobs`: large tool outputs stored by content and shown
as an excerpt) and results (:mod:`.results`: the images and files a tool returns,
stored as its result's content parts).

May import: the package root's vocabulary only (``errors``, ``records``, ``inbox``,
``text``, ``parts``). The store and the slices import tools, never the other way round.
"""

from .spec import ApprovalPolicy, ToolContext, ToolSpec, tool

__all__ = ["ApprovalPolicy", "ToolContext", "ToolSpec", "tool"]
