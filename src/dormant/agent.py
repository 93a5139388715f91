"""Agent definitions: a name, a system prompt, a model and tools."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .config import RETENTION_POLICIES
from .errors import UsageError
from .models.base import Model
from .subject import SubjectOptions
from .tools.mcp.config import McpServer
from .tools.spec import ToolBox, ToolSpec
from .view.pages import PagePolicy

if TYPE_CHECKING:  # retention sits above agents: the runtime resolves the policy
    from .retention.policy import RetentionPolicy

#: Most continuations of a cut reply an agent may ask for (each is a whole model call).
MAX_CONTINUATIONS = 8


@dataclass(frozen=True)
class Agent:
    """What a thread runs. Threads name their agent; the runtime maps the name here.

    ``builtins`` adds ``spawn_thread``, ``report_to_parent``, ``sleep_until`` and
    ``read_blob`` (pages through a large tool output stored as a blob).
    ``compaction_prompt`` replaces :data:`dormant.slices.compaction.DEFAULT_PROMPT`; a
    ``{max_words}`` in it is filled in.

    ``max_spawn_depth`` and ``max_children`` bound ``spawn_thread``: a thread that many
    spawns deep may not spawn, and a thread may not spawn more than ``max_children``
    children (counted over its view and the running slice); the model is told so as a
    tool error.

    ``max_continuations`` (default 0: off) lets a text reply that the output cap cut
    (``finish_reason`` ``"length"``) be continued up to that many times in the same
    slice: the model is shown its cut reply and asked to go on, and the pieces are stored
    as one assistant message (marked cut only if the last piece was cut too). At most
    :data:`MAX_CONTINUATIONS`.
    ``pages`` is the page manager's policy (:class:`~dormant.view.pages.PagePolicy`; None:
    from the runtime's settings). ``subject`` (:class:`~dormant.subject.SubjectOptions`)
    makes the agent remember: recall before each model call, state registers, memory
    tools, facts from compaction. None (the default): no memory, no cost.
    ``retention`` is what the background retention pass and ``dormant gc`` do to this
    agent's threads: ``"long-run"`` (every tier of docs/retention.md: old tool results
    cut, old history that a summary covers deleted, state folded), ``"keep"`` (nothing
    deleted or cut), or a :class:`~dormant.retention.RetentionPolicy`; None (the
    default): the runtime's policy (``DORMANT_RETENTION``, itself ``keep`` by default).
    ``mcp`` names MCP servers (:class:`~dormant.tools.mcp.McpServer`) whose tools the agent
    may call, as async tools named ``<server>__<tool>``; a worker lists them when it starts
    (see docs/mcp.md).
    """

    name: str
    model: Model
    system_prompt: str = "You are a helpful assistant."
    tools: Sequence[ToolSpec] = ()
    builtins: bool = True
    compaction_prompt: str | None = None
    max_spawn_depth: int = 3
    max_children: int = 8
    max_continuations: int = 0
    pages: PagePolicy | None = None
    subject: SubjectOptions | None = None
    retention: RetentionPolicy | str | None = None
    mcp: Sequence[McpServer] = ()
    toolbox: ToolBox = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.name:
            raise UsageError("an agent needs a name")
        if self.max_spawn_depth < 0 or self.max_children < 0:
            raise UsageError("max_spawn_depth and max_children must not be negative")
        if not 0 <= self.max_continuations <= MAX_CONTINUATIONS:
            raise UsageError(
                f"max_continuations must be between 0 and {MAX_CONTINUATIONS}, not {self.max_continuations}"
            )
        if isinstance(self.retention, str) and self.retention not in RETENTION_POLICIES:
            raise UsageError(
                f"unknown retention policy {self.retention!r}: use one of {', '.join(RETENTION_POLICIES)}"
            )
        object.__setattr__(self, "mcp", tuple(self.mcp))
        for server in self.mcp:
            if not isinstance(server, McpServer):
                raise UsageError(f"Agent.mcp takes McpServer items, not {type(server).__name__}")
        if len({s.name for s in self.mcp}) != len(self.mcp):
            raise UsageError(f"agent {self.name!r} names an MCP server twice")
        from .tools.builtins import BUILTIN_TOOLS

        tools = list(self.tools) + (list(BUILTIN_TOOLS) if self.builtins else [])
        if self.subject is not None:
            from .memory.tools import MEMORY_TOOLS

            tools += MEMORY_TOOLS
        object.__setattr__(self, "toolbox", ToolBox(tools))
