"""What a slice does around one model call: cleaning a reply,
counting the messages it writes, keeping the learned token ratio, and the attempt rules
of a claim. Pure helpers of :mod:`dormant.slices.runner` (no I/O).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import msgspec

from ..models.base import ModelEvent, ModelReply
from ..records import Claim, CommitPlan, SliceLoad, StateChange, Thread, ToolCall
from ..store.rows import row_state, state_row
from ..text import clean
from ..tokens import SERVER_PREFIX, ServerEncoder, TokenCounter, encoding
from ..view import ratio as ratio_rules

__all__ = [
    "MAX_SCALED",
    "clean_reply",
    "counted",
    "crashed_out",
    "failures_of",
    "fill_counts",
    "kept_ratio",
    "tapped",
]


async def fill_counts(encoding_name: str, texts: list[str]) -> None:
    """Ask a server that counts tokens (a ``server:`` encoding) for ``texts`` before they
    are counted; nothing for an encoding dormant counts itself."""
    if encoding_name.startswith(SERVER_PREFIX):
        encoder = encoding(encoding_name)
        if isinstance(encoder, ServerEncoder):
            await encoder.fill(texts)


def counted(plan: CommitPlan, counter: TokenCounter) -> CommitPlan:
    """``plan`` with the token count of each of its messages: counted once, as they are
    written, so no view ever counts history again. Only for limits that count tokens
    (:attr:`ViewLimits.counts_tokens`); else messages are stored uncounted (0).

    (Counting on a thread of its own, since tiktoken releases the GIL while it
    encodes, was measured slower: 1,085 against 1,872 turns/s on agent_scale, the
    GIL hand-offs costing more than the encoding.)
    """
    messages = tuple(msgspec.structs.replace(m, tokens=counter.message(m)) for m in plan.messages)
    return msgspec.structs.replace(plan, messages=messages)


def clean_reply(reply: ModelReply) -> ModelReply:
    """``reply`` with its text, reasoning, finish reason and tool calls cleaned
    (:func:`~dormant.text.clean`); the same object when nothing needed it (the common
    case: a few scans, no copy)."""
    text = clean(reply.text)
    reasoning = clean(reply.reasoning)
    finish = clean(reply.finish_reason) if reply.finish_reason is not None else None
    changed = text is not reply.text or reasoning is not reply.reasoning or finish is not reply.finish_reason
    calls = []
    for call in reply.tool_calls:
        cleaned = _clean_call(call)
        changed = changed or cleaned is not call
        calls.append(cleaned)
    if not changed:
        return reply
    return msgspec.structs.replace(
        reply, text=text, tool_calls=tuple(calls), reasoning=reasoning, finish_reason=finish
    )


def _clean_call(call: ToolCall) -> ToolCall:
    ident, name, arguments = clean(call.id), clean(call.name), clean(call.arguments)
    if ident is call.id and name is call.name and arguments is call.arguments:
        return call
    return ToolCall(id=ident, name=name, arguments=arguments)


async def tapped(
    stream: AsyncIterator[ModelEvent], thread_id: str, observe: Callable[[str, ModelEvent], None]
) -> AsyncIterator[ModelEvent]:
    """``stream``, showing each event to ``observe`` as it passes."""
    async for event in stream:
        observe(thread_id, event)
        yield event


#: Budgets under learned token ratios kept by one runner (agents x ratio steps).
MAX_SCALED = 256


def kept_ratio(plan: CommitPlan, load: SliceLoad, model: str, ratio: float) -> CommitPlan:
    """``plan`` keeping ``model``'s token ``ratio`` in the thread's state journal (same
    transaction as the slice's usage) when it moved a step from what the thread kept."""
    if ratio_rules.quantize(ratio) == ratio_rules.quantize(ratio_rules.stored_ratio(load.state, model)):
        return plan
    change = StateChange(op="update", key=ratio_rules.STATE_KEY, value=ratio_rules.state_value(model, ratio))
    state_json = plan.state_json
    if state_json is not None:
        after = row_state(state_json) or {}
    elif not plan.state and load.state is not None:
        after = dict(load.state)
    else:
        after = None  # the thread's state is not known here: the row's copy is cleared
    if after is not None:
        after[change.key] = change.value or ""
        state_json = state_row(after)[0]
    return msgspec.structs.replace(plan, state=(*plan.state, change), state_json=state_json)


def failures_of(claim: Claim, thread: Thread) -> int:
    """This slice's failure number: the attempts the store counted when it was claimed
    (a slice that killed its worker counted too); for a claim made by hand, without
    that count (``attempts`` 0), the thread's recorded failures plus this one."""
    return claim.attempts if claim.attempts > 0 else thread.failures + 1


def crashed_out(claim: Claim, model_retries: int) -> bool:
    """Whether the thread was claimed more than ``model_retries + 1`` times without a
    commit: the earlier slices did not even fail (their workers died, killed by the
    slice, say), and this one must not run (a poison pill)."""
    return claim.attempts > model_retries + 1
