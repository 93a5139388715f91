"""Tools: typed Python functions the model may call.

``@tool`` turns a typed function (sync or async) into a :class:`ToolSpec`; the
JSON schema the model sees and the argument validation both come from the
signature, through pydantic. A tool runs either **inline** (inside the slice,
for fast side-effect-free or idempotent work; the model sees the result in the
same slice) or **async** (written to the outbox, run by the dispatcher, its
result admitted later as an input).

A tool returns text, any JSON-encodable value, or — for large outputs — ``bytes`` or
an (async) iterator of bytes (see :data:`~dormant.tools.blobs.ToolOutput`); an output over
the blob threshold is stored as a blob and the model sees an excerpt of it. It may also
return images and files (:class:`~dormant.parts.Image`, :class:`~dormant.parts.File`,
alone or in a list with text), stored as content parts (:mod:`dormant.tools.results`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import os
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_type_hints, overload

import msgspec
import pydantic

from ..errors import UsageError
from ..parts import File, Image, Text
from ..records import NewInput, NewThread, StateChange
from .blobs import CHUNK_BYTES, DEFAULT_THRESHOLD, BlobReader, BlobWriter, ToolOutput
from .pool import SyncCall, ToolThreads, default_pool
from .results import PartsOutput, parts_output

if TYPE_CHECKING:
    from ..slices.memory import SubjectMemory

ToolMode = Literal["inline", "async"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolProgress:
    """Progress a running async call reports (an MCP server's progress notification):
    ``progress`` so far, of ``total`` when known, and the server's ``message``."""

    call_id: str
    progress: float
    total: float | None = None
    message: str | None = None


@dataclass(slots=True)
class ToolContext:
    """What a running tool may know and do.

    ``call_id`` is the idempotency key of the call: a tool with side effects should
    use it so that a re-run (after a crash, for idempotent tools) does the effect
    once. Inline tools may record effects (child threads, admissions) that commit
    with the slice, atomically. ``blobs`` reads the blobs of the thread's history
    (the ``read_blob`` tool uses it); outputs over ``blob_threshold`` bytes are stored
    as blobs. A sync tool runs in a thread of ``tool_threads`` (the process-wide
    bounded pool when None); ``sync_call`` then tells whether that thread started it
    and whether it is still in it.
    """

    thread_id: str
    call_id: str
    agent: str
    attempt: int = 1
    message_seq: int = 0  # seq of the assistant message that made the call (inline only)
    parent_id: str | None = None
    now: float = 0.0
    agents: frozenset[str] = frozenset()
    threads: list[NewThread] = field(default_factory=list)
    admissions: list[NewInput] = field(default_factory=list)
    state_changes: list[StateChange] = field(default_factory=list)
    inline: bool = True
    blobs: BlobReader | None = None
    #: where an async tool may store blobs of its own (MCP images and resources)
    blob_writer: BlobWriter | None = None
    blob_threshold: int = DEFAULT_THRESHOLD
    #: spawn_thread's bounds (the agent's) and the children this thread already has
    max_spawn_depth: int = 3
    max_children: int = 8
    children: int = 0
    tool_threads: ToolThreads | None = None
    sync_call: SyncCall | None = None
    #: the slice's subject memory ( None: the thread has no subject), see
    #: :mod:`dormant.memory.tools`
    memory: SubjectMemory | None = None
    #: where an async tool reports progress (the dispatcher's, published on the thread's
    #: event stream by ``dormant serve``); None: nobody listens
    progress: Callable[[ToolProgress], None] | None = None

    def spawn(self, child: NewThread) -> None:
        """Create a child thread when the slice commits (inline tools only)."""
        self._require_inline("spawn a thread")
        self.threads.append(child)

    def admit(self, item: NewInput) -> None:
        """Admit an input when the slice commits (inline tools only)."""
        self._require_inline("admit an input")
        self.admissions.append(item)

    def set_state(self, key: str, value: object) -> None:
        """Set the thread's state ``key`` to ``value`` (JSON-encodable; None deletes it),
        journaled with the slice's commit, in its transaction (inline tools only)."""
        self._require_inline("set state")
        if value is None:
            self.state_changes.append(StateChange(op="delete", key=key))
        else:
            encoded = msgspec.json.encode(value).decode()
            self.state_changes.append(StateChange(op="update", key=key, value=encoded))

    def _require_inline(self, what: str) -> None:
        if not self.inline:
            raise UsageError(f"only inline tools can {what} from a slice")


ToolFn = Callable[..., Any]
#: Whether a call needs a person's approval: always, never, or a policy of its arguments.
ApprovalRule = bool | Callable[[dict[str, Any], ToolContext], bool]


@dataclass(frozen=True, slots=True)
class ApprovalPolicy:
    """When a tool's calls wait for a person, and for how long.

    ``needs``: True, or ``callable(args, ctx) -> bool`` (a policy that raises counts as
    True: a broken rule asks). ``deadline_s``: seconds until an undecided call expires
    (None: it waits until someone acts). ``role``: the deciders' role (None: anyone of the
    thread's tenant). ``escalate_to``: at the deadline, hand the call to that role for
    ``escalate_s`` more seconds (default ``deadline_s``) instead of expiring it.
    """

    needs: ApprovalRule = True
    deadline_s: float | None = None
    role: str | None = None
    escalate_to: str | None = None
    escalate_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("deadline_s", "escalate_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise UsageError(f"approval {name} must be positive seconds or None, not {value!r}")
        if self.escalate_to is not None and self.deadline_s is None:
            raise UsageError("an approval that escalates needs a deadline_s")


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as the runtime knows it: schema, mode, options and the function."""

    name: str
    description: str
    parameters: dict[str, Any]
    fn: ToolFn
    mode: ToolMode = "inline"
    idempotent: bool = False
    timeout: float = 30.0
    context_param: str | None = None
    validator: type[pydantic.BaseModel] | None = None
    #: None: the tool runs without asking anyone
    approval: ApprovalPolicy | None = None

    def schema(self) -> dict[str, Any]:
        """The OpenAI-style function schema of the tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def parse(self, arguments: str) -> dict[str, Any]:
        """Validate raw JSON ``arguments``; raise ``ValueError`` with a readable reason."""
        if self.validator is None:
            try:
                raw = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as exc:
                raise ValueError(f"arguments are not valid JSON: {exc}") from None
            if not isinstance(raw, dict):
                raise ValueError("arguments must be a JSON object")
            return raw
        try:
            model = self.validator.model_validate_json(arguments if arguments.strip() else "{}")
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}" for err in exc.errors()
            )
            raise ValueError(f"invalid arguments: {problems}") from None
        # iter(): dict(model) probes the model for .keys() first, a failing and slow lookup
        return dict(iter(model))

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput | PartsOutput:
        """Run the function and return its output: bytes and streams as returned, not
        read yet, images and files as a :class:`PartsOutput` (see :func:`result_output`);
        anything else as text.

        A sync function runs in a thread of ``ctx.tool_threads`` (bounded; see
        :class:`~dormant.tools.pool.ToolThreads`), tracked by ``ctx.sync_call``."""
        kwargs = dict(args)
        if self.context_param:
            kwargs[self.context_param] = ctx
        if inspect.iscoroutinefunction(self.fn):
            result = await self.fn(**kwargs)
        else:
            ctx.sync_call = SyncCall()
            result = await (ctx.tool_threads or default_pool()).call(self.fn, kwargs, ctx.sync_call)
        return result_output(result)

    async def invoke(self, args: dict[str, Any], ctx: ToolContext) -> str:
        """Run the function and return its whole output as text (a stream is read to its
        end and joined: the runtime uses :meth:`run` and stores large outputs as blobs)."""
        output = await self.run(args, ctx)
        if isinstance(output, str):
            return output
        if isinstance(output, PartsOutput):  # the text, each image or file named
            return "\n\n".join(_item_text(item) for item in output.items)
        if isinstance(output, bytes):
            return output.decode("utf-8", errors="replace")
        parts: list[bytes] = []
        if isinstance(output, AsyncIterable):
            async for piece in output:
                parts.append(_piece(piece))
        else:
            parts.extend(_piece(piece) for piece in output)
        return b"".join(parts).decode("utf-8", errors="replace")


def _piece(piece: bytes | str) -> bytes:
    return piece.encode() if isinstance(piece, str) else bytes(piece)


def _item_text(item: str | Text | Image | File) -> str:
    if isinstance(item, str):
        return item
    if isinstance(item, Text):
        return item.text
    return f"[{type(item).__name__.lower()}: {item.name or 'unnamed'}]"


def result_output(result: Any) -> ToolOutput | PartsOutput:
    """A tool's return value as its output: ``bytes`` (bytearray, memoryview) as bytes,
    an async iterable or an iterator (a generator, a file) as a stream of bytes, an
    Image or a File, or a list holding one (or a Text), as a :class:`PartsOutput`,
    anything else as the text :func:`result_text` makes of it."""
    if isinstance(result, bytes | bytearray | memoryview):
        return bytes(result)
    found = parts_output(result, result_text)
    if found is not None:
        return found
    if isinstance(result, AsyncIterable | Iterator):
        stream: AsyncIterable[bytes] | Iterator[bytes] = result
        return stream
    return result_text(result)


def result_text(result: Any) -> str:
    """A tool's return value as the text the model sees (JSON for non-strings; bytes
    decoded as UTF-8)."""
    if isinstance(result, str):
        return result
    if isinstance(result, bytes | bytearray | memoryview):
        return bytes(result).decode("utf-8", errors="replace")
    if isinstance(result, pydantic.BaseModel):
        return result.model_dump_json()
    return msgspec.json.encode(result).decode()


@overload
def tool(
    fn: ToolFn,
    *,
    name: str | None = None,
    description: str | None = None,
    mode: ToolMode = "inline",
    idempotent: bool = False,
    timeout: float = 30.0,
    needs_approval: ApprovalRule = False,
    approval: ApprovalPolicy | None = None,
) -> ToolSpec: ...


@overload
def tool(
    fn: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    mode: ToolMode = "inline",
    idempotent: bool = False,
    timeout: float = 30.0,
    needs_approval: ApprovalRule = False,
    approval: ApprovalPolicy | None = None,
) -> Callable[[ToolFn], ToolSpec]: ...


def tool(
    fn: ToolFn | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    mode: ToolMode = "inline",
    idempotent: bool = False,
    timeout: float = 30.0,
    needs_approval: ApprovalRule = False,
    approval: ApprovalPolicy | None = None,
) -> ToolSpec | Callable[[ToolFn], ToolSpec]:
    """Declare a tool from a typed function. Usable bare (``@tool``) or with options.

    A parameter annotated :class:`ToolContext` receives the call's context and is
    not part of the schema. Raises :class:`UsageError` for an untyped parameter.

    The tool returns its result: text, or any value JSON can encode (sent as JSON).
    For large outputs it may return ``bytes`` or a stream of bytes — an async
    iterator, or an iterator such as a generator (advanced in a worker thread) — for
    example :func:`file_output`. A stream is never joined in memory: an output over
    ``Settings.blob_threshold_bytes`` (16 KiB) is streamed into the store as a blob and
    the model sees a head/tail excerpt it can page through with ``read_blob``. The
    tool's timeout covers reading its stream.

    ``needs_approval`` (True, or a policy ``callable(args, ctx) -> bool``) makes a call
    wait for a person's decision before it runs (see ``docs/approvals.md``); ``approval``
    sets its deadline, decider role and escalation.
    """

    def wrap(f: ToolFn) -> ToolSpec:
        return make_tool(
            f,
            name=name,
            description=description,
            mode=mode,
            idempotent=idempotent,
            timeout=timeout,
            needs_approval=needs_approval,
            approval=approval,
        )

    return wrap(fn) if fn is not None else wrap


def make_tool(
    f: ToolFn,
    *,
    name: str | None = None,
    description: str | None = None,
    mode: ToolMode = "inline",
    idempotent: bool = False,
    timeout: float = 30.0,
    needs_approval: ApprovalRule = False,
    approval: ApprovalPolicy | None = None,
) -> ToolSpec:
    """The non-decorator form of :func:`tool`."""
    if mode not in ("inline", "async"):
        raise UsageError(f"tool mode must be 'inline' or 'async', not {mode!r}")
    if timeout <= 0:
        raise UsageError("tool timeout must be positive")
    if not (isinstance(needs_approval, bool) or callable(needs_approval)):
        raise UsageError("needs_approval is True, False or a callable(args, ctx) -> bool")
    if needs_approval is not False and approval is None:
        approval = ApprovalPolicy(needs=needs_approval)
    elif approval is not None and needs_approval is not False:
        approval = dataclasses.replace(approval, needs=needs_approval)
    tool_name = name or f.__name__
    hints = get_type_hints(f)
    fields: dict[str, Any] = {}
    context_param = None
    for param in inspect.signature(f).parameters.values():
        annotation = hints.get(param.name, inspect.Parameter.empty)
        if annotation is ToolContext:
            context_param = param.name
            continue
        if annotation is inspect.Parameter.empty:
            raise UsageError(f"tool {tool_name!r}: parameter {param.name!r} needs a type")
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default)
    validator = pydantic.create_model(f"{tool_name}_args", **fields)
    schema = validator.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return ToolSpec(
        name=tool_name,
        description=(description or inspect.getdoc(f) or tool_name).strip(),
        parameters=schema,
        fn=f,
        mode=mode,
        idempotent=idempotent,
        timeout=timeout,
        context_param=context_param,
        validator=validator,
        approval=approval,
    )


class ToolBox:
    """The tools of one agent, by name: the ones given, then the ones a worker found
    (the MCP servers' tools, set with :meth:`set_found` when listed and again when a
    listing changes)."""

    def __init__(self, tools: Sequence[ToolSpec]) -> None:
        self._by_name: dict[str, ToolSpec] = {}
        for spec in tools:
            if spec.name in self._by_name:
                raise UsageError(f"two tools are named {spec.name!r}")
            self._by_name[spec.name] = spec
        self._given = dict(self._by_name)
        self._found: dict[str, dict[str, ToolSpec]] = {}
        self.schemas: tuple[dict[str, Any], ...] = tuple(t.schema() for t in tools)

    def set_found(self, source: str, tools: Sequence[ToolSpec]) -> list[str]:
        """Replace the tools found from ``source`` (an MCP server's name) by ``tools``.

        A tool whose name is taken (by a given tool or another source's) is left out;
        answers the names left out. The model sees the new set from the next request on.
        """
        taken = set(self._given) | {n for s, found in self._found.items() if s != source for n in found}
        kept = {t.name: t for t in tools if t.name not in taken}
        self._found[source] = kept
        by_name = dict(self._given)
        for found in self._found.values():
            by_name.update(found)
        self._by_name = by_name
        self.schemas = tuple(t.schema() for t in by_name.values())
        return [t.name for t in tools if t.name not in kept]

    def get(self, name: str) -> ToolSpec | None:
        """The tool called ``name``, or None."""
        return self._by_name.get(name)

    def __len__(self) -> int:
        return len(self._by_name)

    def names(self) -> tuple[str, ...]:
        """The names of the tools, in the order given."""
        return tuple(self._by_name)


def file_output(path: str | os.PathLike[str], *, chunk_bytes: int = CHUNK_BYTES) -> AsyncIterator[bytes]:
    """A file's bytes as a stream for a tool to return: read in ``chunk_bytes`` pieces,
    in a worker thread, when the output is stored; never held whole.

    Raises ``FileNotFoundError`` (and the like) at once if the file cannot be found.
    """
    os.stat(path)
    return _read_file(path, chunk_bytes)


async def _read_file(path: str | os.PathLike[str], chunk_bytes: int) -> AsyncIterator[bytes]:
    file = await asyncio.to_thread(open, path, "rb")
    try:
        while piece := await asyncio.to_thread(file.read, chunk_bytes):
            yield piece
    finally:
        file.close()


def timeout_reason(spec: ToolSpec, ctx: ToolContext) -> tuple[str, bool]:
    """Why a call of ``spec`` with context ``ctx`` ended at its timeout, and whether it ran.

    An async tool was cancelled: "timed out". A sync tool still waiting for a pool
    thread never ran (False). A sync tool that had started cannot be stopped: its
    thread may still be in it, so its outcome is unknown, never "timed out".
    """
    after = f"{spec.timeout:g}s"
    call = ctx.sync_call
    if call is None:
        return f"timed out after {after}", True
    if not call.started:
        size = (ctx.tool_threads or default_pool()).size
        return f"no free tool thread within {after} (all {size} busy); the call did not run", False
    if call.finished:
        return f"outcome unknown: the call returned but its output was not stored within {after}", True
    return (
        f"outcome unknown: still running after {after} (a sync tool cannot be stopped); "
        "its effects may still happen",
        True,
    )
