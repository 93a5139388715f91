"""Compaction: when to summarize a thread's history, where to cut it, what to ask.

Pure logic; the runtime calls the model and commits the :class:`~dormant.records.Summary`
with the slice's plan. A summary covers the thread's history up to and including
``upto_seq`` (and whatever it inherited or the previous summary covered); later views
show the summary and the messages after it. The originals stay in the store.

The cut point obeys the pairing rules: it never falls between an assistant tool call
and its results, and never at or after a call still waiting for its result, so a
pending call stays visible and its result, when it comes, follows it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from ..models.base import ModelRequest
from ..records import Message, SliceLoad, Summary, ViewLimits
from ..view.builder import cost, message_bytes, message_tokens

DEFAULT_PROMPT = """\
You are compacting the history of a long-running conversation so that it can go on \
within a limited context window. Write a summary that a reader who never saw the \
conversation could continue from: the user's goals and standing instructions, decisions \
made and why, facts learned, identifiers (names, ids, paths, numbers, URLs) that may \
matter later, work done and its results, and open questions and pending work. Plain \
prose and short lists, no preamble. Keep it under {max_words} words.\
"""

#: The closing request after the history to summarize.
INSTRUCTION = "Summarize the conversation so far as instructed. Reply with the summary only."


def due(load: SliceLoad, limits: ViewLimits, share: float) -> bool:
    """Whether what was written since the latest summary passes ``share`` of what a view
    holds (never when ``share`` is 0: compaction is off). The page manager
    (:attr:`dormant.view.pages.PagePolicy.compact_at`, 0.85 by default) gives ``share``.

    A view holds ``limits.max_tokens`` (what the model's window leaves for history),
    and no more than its message and byte caps: compacting when the thread's own part
    of the view passes ``share`` of any of them means no message drops out of the view
    before a summary covers it. If some did anyway (one slice wrote more than the rest
    of the view holds), it is due at once.
    """
    if share <= 0:
        return False
    thread = load.thread
    since = thread.last_seq - thread.summary_seq
    own = load.view[load.inherited :]
    if since > share * limits.max_messages or (since and (not own or own[0].seq > thread.summary_seq + 1)):
        return True
    # the next view holds at most max_messages: compact now if this slice's inputs and
    # its reply would push a message out before a summary covers it (at a share near 1
    # and a small cap, "passes the share" alone comes one turn late)
    if since and since + len(load.inputs) + 1 > limits.max_messages:
        return True
    if limits.counts_tokens:
        if thread.tokens_since_summary > share * limits.max_tokens:
            return True
        # messages stored uncounted count as their byte bounds; exactly only if that could decide
        threshold = share * limits.max_tokens
        if (
            sum(cost(m) for m in own) > threshold
            and sum(message_tokens(m, limits.encoding) for m in own) > threshold
        ):
            return True
    return sum(message_bytes(m) for m in own) > share * limits.max_bytes


def pending_calls(messages: Sequence[Message]) -> set[str]:
    """Ids of the assistant tool calls in ``messages`` that have no result after them."""
    open_calls: set[str] = set()
    for message in messages:
        if message.role == "assistant":
            open_calls.update(call.id for call in message.tool_calls)
        elif message.role == "tool" and message.tool_call_id:
            open_calls.discard(message.tool_call_id)
    return open_calls


def cut_index(
    own: Sequence[Message],
    keep_tokens: int,
    keep_bytes: int,
    keep_messages: int | None = None,
    *,
    weight: Callable[[Message], float] | None = None,
    cap_tokens: int | None = None,
    cap_bytes: int | None = None,
) -> int | None:
    """Index in ``own`` (the thread's own messages of a view, oldest first) of the last
    message to summarize, or None when no cut is allowed.

    Keeps the newest messages that fit ``keep_tokens``, ``keep_bytes`` and
    ``keep_messages`` (at least the newest message; uncounted messages count 0 tokens);
    the cut is moved earlier until the next message is not a tool result and no pending
    call is at or before it.

    With ``weight`` (the page manager's information density, :mod:`dormant.view.pages`) a
    message costs its tokens and bytes divided by its weight against ``keep_tokens``
    and ``keep_bytes``, and its real tokens and bytes against ``cap_tokens`` and
    ``cap_bytes``: dense content stays verbatim longer, within the caps.
    """
    if len(own) < 2:
        return None
    pending = pending_calls(own)
    first_pending = next(
        (i for i, m in enumerate(own) if any(call.id in pending for call in m.tool_calls)), len(own)
    )

    def weighed(m: Message) -> tuple[float, float]:
        w = weight(m) if weight is not None else 1.0
        return m.tokens / w, message_bytes(m) / w

    start = len(own) - 1  # the first message kept
    tokens, size = weighed(own[start])
    real_tokens, real_size = own[start].tokens, message_bytes(own[start])
    while start > 0:
        older = own[start - 1]
        t, b = weighed(older)
        if tokens + t > keep_tokens or size + b > keep_bytes:
            break
        if cap_tokens is not None and real_tokens + older.tokens > cap_tokens:
            break
        if cap_bytes is not None and real_size + message_bytes(older) > cap_bytes:
            break
        if keep_messages is not None and len(own) - start >= keep_messages:
            break
        start -= 1
        tokens, size = tokens + t, size + b
        real_tokens, real_size = real_tokens + older.tokens, real_size + message_bytes(older)
    start = min(start, first_pending)
    while start > 0 and own[start].role == "tool":
        start -= 1
    return start - 1 if start > 0 else None


def request(load: SliceLoad, index: int, prompt: str, max_words: int, extra: str = "") -> ModelRequest:
    """The model request that summarizes ``load``'s view through own message ``index``;
    ``extra`` is appended to the prompt (the request for facts, :mod:`dormant.memory.facts`)."""
    covered = load.view[: load.inherited + index + 1]
    closing = Message(seq=covered[-1].seq + 1, role="user", content=INSTRUCTION, source="compaction")
    return ModelRequest(
        thread_id=load.thread.id,
        # not str.format: a custom prompt may hold other braces (a JSON example, say)
        system=prompt.replace("{max_words}", str(max_words)) + extra,
        messages=(*covered, closing),
        summary=load.summary.content if load.summary is not None else None,
    )


def summary(load: SliceLoad, index: int, text: str, tokens: int, now: float) -> Summary:
    """The summary record of ``text`` covering ``load``'s own messages through ``index``."""
    own = load.view[load.inherited :]
    # stored counts (a clipped message in the view counts less than it is stored with,
    # so covered_tokens comes out too high: that only delays the next compaction)
    after = sum(m.tokens for m in own[index + 1 :])
    return Summary(
        thread_id=load.thread.id,
        upto_seq=own[index].seq,
        content=text,
        tokens=tokens,
        covered_tokens=max(0, load.thread.tokens - after),
        made_at_seq=load.thread.last_seq,
        created_at=now,
    )


def compacted(load: SliceLoad, index: int, new: Summary) -> SliceLoad:
    """``load`` as a view that starts from ``new``: summary plus the messages after it."""
    return SliceLoad(
        thread=load.thread,
        view=load.view[load.inherited + index + 1 :],
        inputs=load.inputs,
        summary=new,
        inherited=0,
    )


#: How much of a view is kept when the server refused a prompt as over its window.
OVERFLOW_SHRINK = 0.5


def after_overflow(limits: ViewLimits) -> ViewLimits:
    """The limits to load a view with once more after ``ModelError.context_overflow``.

    The hook for the slice runner: the server counted the prompt over its window
    (its template costs more than our count, or its window is smaller than
    declared). Retry the slice once with half the token, byte and message budget
    (a summary is due at once if messages drop out, see :func:`due`); if that
    overflows too, it is the thread's failure.
    """
    return msgspec.structs.replace(
        limits,
        max_tokens=max(1, int(limits.max_tokens * OVERFLOW_SHRINK)),
        max_bytes=max(1, int(limits.max_bytes * OVERFLOW_SHRINK)),
        max_messages=max(1, int(limits.max_messages * OVERFLOW_SHRINK)),
    )
