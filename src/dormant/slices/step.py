"""The pure step logic of one execution slice.

:class:`Turn` is a state machine over (loaded view, inputs, model replies, inline
tool results) that produces a frozen :class:`CommitPlan`. It does no I/O: the
runtime calls the model and runs inline tools, and feeds what came back in. That
keeps the hardest rules testable without a database or a model:

* inputs become messages in admission order;
* while async tool calls are open, the model is not called;
* every assistant tool call gets exactly one tool result: inline results and
  error results (unknown tool, invalid arguments) in this slice, async results
  later through the inbox;
* a call to a client tool (``external``: declared by the thread's client, see
  :mod:`dormant.tools.external`) is an outbox entry no dispatcher runs: the thread
  waits for the client's answer like any async call;
* inline rounds are bounded; nothing is committed until the plan is taken.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..approvals import ASK_USER, needs_approval, request_for
from ..models.base import ModelReply, ModelRequest
from ..parts.render import BlobSource as BlobReader
from ..parts.render import read_whole
from ..records import (
    CommitPlan,
    Input,
    Message,
    NewApproval,
    NewCall,
    NewInput,
    NewThread,
    Part,
    SliceLoad,
    StateChange,
    Summary,
    ToolCall,
    Usage,
    ViewLimits,
)
from ..tools.spec import ToolBox, ToolContext, ToolSpec
from ..view.builder import extend_view
from ..view.sections import compose


@dataclass(frozen=True, slots=True)
class InlineCall:
    """An inline tool call the runtime must run before the next model round."""

    call: ToolCall
    spec: ToolSpec
    args: dict[str, Any]
    message_seq: int
    #: children the thread has spawned before this call (its view, this slice): spawn_thread's fan-out
    children: int = 0


@dataclass(frozen=True, slots=True)
class InlineResult:
    """What running an :class:`InlineCall` produced."""

    call: ToolCall
    content: str
    is_error: bool = False
    #: the images and files the tool returned, already stored (:mod:`dormant.tools.results`)
    parts: tuple[Part, ...] = ()
    threads: tuple[NewThread, ...] = ()
    admissions: tuple[NewInput, ...] = ()
    state: tuple[StateChange, ...] = ()


_PREFIX = {"timer": "[timer]", "event": "[event]"}
#: What the model is asked after a reply the output cap cut, to continue it (the request
#: shows the cut reply as the last assistant message; neither is stored as such).
CONTINUE = (
    "Your previous reply was cut off by the output limit. Continue it exactly where it "
    "stopped, without repeating anything."
)
#: The built-in tool that spawns children, and how its success answer starts.
SPAWN = "spawn_thread"
SPAWNED = "spawned thread "


def call_id(model_id: str, seq: int, index: int) -> str:
    """The id a tool call is stored under: the model's id made unique in the thread.

    Models may reuse ids across replies (some servers number calls ``call_0`` in
    every reply); the call id is the dedup key of the result and the tool's
    idempotency key, so it must never repeat. The assistant message's seq and the
    call's index make it unique; the model sees these ids in its history.
    """
    return f"{model_id}.{seq}.{index}"


def input_message(item: Input, seq: int, now: float) -> Message:
    """The history message an input becomes when a slice consumes it. A user's (or an
    event's, a report's) message is dated when it was sent (admitted), a tool result
    when the slice read it."""
    if item.kind == "tool_result":
        return Message(
            seq=seq,
            role="tool",
            content=item.content,
            tool_call_id=item.call_id,
            name=item.tool_name,
            source="tool_result",
            input_id=item.id,
            created_at=now,
            parts=item.parts,
        )
    if item.kind == "report":
        content = f"[report from thread {item.source}] {item.content}"
    elif item.kind in _PREFIX:
        content = f"{_PREFIX[item.kind]} {item.content}"
    else:
        content = item.content
    sent = item.admitted_at if 0 < item.admitted_at <= now else now
    return Message(
        seq=seq,
        role="user",
        content=content,
        source=item.kind,
        input_id=item.id,
        created_at=sent,
        parts=item.parts,
    )


class Turn:
    """One slice's evolving commit plan. Create, then follow :attr:`wants_model`."""

    def __init__(
        self,
        load: SliceLoad,
        *,
        token: str,
        system: str,
        tools: ToolBox,
        max_rounds: int,
        now: float,
        summary: Summary | None = None,
        limits: ViewLimits | None = None,
        usage: Usage | None = None,
        sections: str = "",
        external: Sequence[dict[str, Any]] = (),
        blobs: BlobReader | None = None,
    ) -> None:
        self.thread = load.thread
        #: where the bytes of the view's images and files are read when a request is built
        self._blobs = blobs
        #: the client's tool schemas (shown to the model after the agent's own) and names
        self.external = tuple(external)
        self._external_names = frozenset(schema["function"]["name"] for schema in self.external)
        #: the state and memories sections shown after the summary (:mod:`dormant.view.sections`)
        self.sections = sections
        self.limits = limits
        self.token = token
        self.system = system
        self.tools = tools
        self.max_rounds = max_rounds
        self.now = now
        self.rounds = 0
        self._view = load.view
        self._inherited = load.inherited
        self._summary = load.summary  # the one the view starts from
        self._view_usage = load.usage  # what the view weighs, if the loader knew it
        self._new_summary = summary  # the one this slice writes (compaction), if any
        self._new: list[Message] = []
        self._calls: list[NewCall] = []
        self._approvals: list[NewApproval] = []
        self._threads: list[NewThread] = []
        self._admissions: list[NewInput] = []
        self._state: list[StateChange] = []
        # runs this slice ends: by default one per user input (one user turn)
        self._runs = sum(1 for item in load.inputs if item.kind == "user")
        self._consumed = tuple(item.id for item in load.inputs)
        self._awaiting = self.thread.awaiting
        self._errors: list[tuple[ToolCall, str]] = []
        self._usage = usage  # of every model call of this slice (the compaction's passed in)
        seq = self.thread.last_seq
        for item in load.inputs:
            seq += 1
            self._add(input_message(item, seq, now))
            if item.kind == "tool_result":
                self._awaiting = max(0, self._awaiting - 1)
        self.wants_model = bool(load.inputs) and self._awaiting == 0

    def _add(self, message: Message) -> None:
        """Append ``message`` (the runtime counts its tokens when it commits the plan)."""
        self._new.append(message)

    @property
    def next_seq(self) -> int:
        """The seq the next appended message gets."""
        return self.thread.last_seq + len(self._new) + 1

    def request(self) -> ModelRequest:
        """The model request for the next round: system prompt, view, new messages.

        Under ``limits`` (the prompt budget, :mod:`dormant.view.budget`) the new messages are
        held to the same rule as history: each one over a share of the budget is shown
        as head + tail, and the oldest messages drop out first (never a tool call
        without its results) until the whole request fits. The plan keeps them whole.
        """
        return self._request(self._new)

    def continuation(self, cut: ModelReply) -> ModelRequest:
        """The request that asks the model to continue ``cut``, a reply the output cap cut
        : this round's request, then ``cut`` as an assistant message and
         :data:`CONTINUE` as a user message (under ``limits`` like the rest; not stored)."""
        seq = self.next_seq
        extra = (
            Message(seq=seq, role="assistant", content=cut.text, created_at=self.now),
            Message(seq=seq + 1, role="user", content=CONTINUE, source="continue", created_at=self.now),
        )
        return self._request([*self._new, *extra])

    def _request(self, new: Sequence[Message]) -> ModelRequest:
        messages = self._view + tuple(new)
        if self.limits is not None:
            messages = extend_view(self._view, new, self.limits, self._summary, self._view_usage)
        return ModelRequest(
            thread_id=self.thread.id,
            system=self.system,
            messages=messages,
            tools=self.tools.schemas + self.external,
            summary=compose(self._summary.content if self._summary is not None else None, self.sections),
            blobs=functools.partial(read_whole, self._blobs, self.thread.id)
            if self._blobs is not None and any(m.parts for m in messages)
            else None,
        )

    def on_reply(self, reply: ModelReply) -> list[InlineCall]:
        """Record the model's reply; return the inline calls to run now.

        Calls to unknown tools or with invalid arguments are answered here with an
        error result. Async calls go to the outbox and end the slice.
        """
        self.rounds += 1
        seq = self.next_seq
        calls = tuple(
            ToolCall(id=call_id(call.id, seq, index), name=call.name, arguments=call.arguments)
            for index, call in enumerate(reply.tool_calls)
        )
        if reply.usage is not None:
            self._usage = reply.usage if self._usage is None else self._usage + reply.usage
        self._add(
            Message(
                seq=seq,
                role="assistant",
                content=reply.text,
                tool_calls=calls,
                created_at=self.now,
                finish_reason=reply.finish_reason,
                reasoning=reply.reasoning or None,
                usage=reply.usage,
            )
        )
        inline: list[InlineCall] = []
        errors: list[tuple[ToolCall, str]] = []
        children = -1  # counted when an inline call needs it (a scan of the view)
        for call in calls:
            spec = self.tools.get(call.name)
            if spec is None and call.name in self._external_names:
                # the client runs it: an outbox entry no dispatcher claims, answered from outside
                self._calls.append(
                    NewCall(call_id=call.id, tool=call.name, arguments=call.arguments, external=True)
                )
                self._awaiting += 1
                continue
            if spec is None:
                errors.append((call, f"error: unknown tool {call.name!r}"))
                continue
            try:
                args = spec.parse(call.arguments)
            except ValueError as exc:
                errors.append((call, f"error: {exc}"))
                continue
            if spec.name == ASK_USER or self._asks(spec, call, args):
                # waits for a person: an approvals row, not an outbox entry (dormant.approvals)
                self._approvals.append(request_for(spec, call.id, call.arguments, self.now))
                self._awaiting += 1
                continue
            if spec.mode == "async":
                self._calls.append(
                    NewCall(
                        call_id=call.id,
                        tool=spec.name,
                        arguments=call.arguments,
                        idempotent=spec.idempotent,
                    )
                )
                self._awaiting += 1
            else:
                if children < 0:
                    children = self.children()
                inline.append(InlineCall(call=call, spec=spec, args=args, message_seq=seq, children=children))
                if spec.name == SPAWN:
                    children += 1  # counted whether or not it succeeds: the limit errs strict
        self._errors = errors
        self.wants_model = False
        if not reply.tool_calls:
            return []
        if not inline:
            self._answer([])
        return inline

    def _asks(self, spec: ToolSpec, call: ToolCall, args: dict[str, Any]) -> bool:
        if spec.approval is None:
            return False
        ctx = ToolContext(thread_id=self.thread.id, call_id=call.id, agent=self.thread.agent, now=self.now)
        return needs_approval(spec, args, ctx)

    def children(self) -> int:
        """Child threads this thread spawned, as far as its view and this slice show."""
        return sum(
            1
            for message in (*self._view[self._inherited :], *self._new)  # not the parent's children
            if message.role == "tool" and message.name == SPAWN and message.content.startswith(SPAWNED)
        )

    def on_results(self, results: Sequence[InlineResult]) -> None:
        """Record the inline results (in call order) and decide on another round."""
        self._answer(results)

    def _answer(self, results: Sequence[InlineResult]) -> None:
        by_id = {r.call.id: r for r in results}
        errors = {call.id: text for call, text in self._errors}
        last = self._new[-1]
        for call in last.tool_calls:
            if call.id in by_id:
                result = by_id[call.id]
                self._threads.extend(result.threads)
                self._admissions.extend(result.admissions)
                self._state.extend(result.state)
                self._tool_message(call, result.content, result.parts)
            elif call.id in errors:
                self._tool_message(call, errors[call.id])
        self._errors = []
        answered_here = bool(by_id) or bool(errors)
        self.wants_model = answered_here and self._awaiting == 0 and self.rounds < self.max_rounds

    def _tool_message(self, call: ToolCall, content: str, parts: tuple[Part, ...] = ()) -> None:
        self._add(
            Message(
                seq=self.next_seq,
                role="tool",
                content=content,
                tool_call_id=call.id,
                name=call.name,
                source="inline",
                created_at=self.now,
                parts=parts,
            )
        )

    def plan(self) -> CommitPlan:
        """The frozen plan to commit; the turn must not be used afterwards."""
        return CommitPlan(
            thread_id=self.thread.id,
            token=self.token,
            consumed=self._consumed,
            messages=tuple(self._new),
            calls=tuple(self._calls),
            approvals=tuple(self._approvals),
            threads=tuple(self._threads),
            admissions=tuple(self._admissions),
            awaiting=self._awaiting,
            summary=self._new_summary,
            usage=self._usage,
            state=tuple(self._state),
            runs=self._runs,
        )
