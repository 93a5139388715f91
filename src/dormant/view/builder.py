"""The view builder: the bounded slice of history a model call sees.

A view is: the latest compaction summary (the thread's own, or the one an ancestor
had when the thread was spawned), then the newest messages that fit the budget,
read from the newest end of the thread and, for a child thread, from its
ancestors up to the spawn point, by reference. Messages the summary covers are
never read. The walk stops at the first message that does not fit one of the
bounds (tokens, message count, bytes; at the count it stops without reading the
next one), so a view is always a contiguous suffix of the history, and it never
starts with a tool result whose assistant tool call was left out: a call and its
results are kept or dropped together.

A single message over a quarter of the token or byte budget (and over 256 tokens or
1 KiB) is shown clipped: its head and tail with a note of how much was cut from the
middle; one that is that large with its images and files shows them as their text and
facts first. The stored message is unchanged.

Old images and files leave before text of their age does: once a view is full (a
message does not fit its token or byte budget), the messages older than the newest
half of the budget (:func:`protected`) show their parts as text and facts
(:func:`dormant.parts.render.demoted`: the placeholder a text-only model reads), and
the walk goes on with older messages shown so. What such a view counts of a demoted
message is never stored as its count. Extending a view (:func:`extend_view`) follows
the same rule; a cached view is extended only where that gives the view a rebuild
would, else it is built afresh (:func:`_extend`'s third value).

Tokens are added up only when the limits count them (:attr:`ViewLimits.counts_tokens`):
when four times the byte cap fits the token budget, the byte cap alone keeps every
view within it, whatever the text, and tokens are neither counted nor summed. Else,
per view, a message costs its stored count, or if it was stored uncounted the bound
its UTF-8 bytes give (:func:`token_bound`: a token is at least one byte). While the
costs fit the budget the fit is proven and nothing is counted; only when they would
pass it are the uncounted messages (and summary) counted, exactly, to decide.

The views are cached by :class:`dormant.view.cache.ViewCache` (its own module, owned
outside the stores so the RSS governor can shrink it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import msgspec

from ..parts.render import demoted, parts_tokens
from ..records import Message, SliceLoad, Summary, Thread, ViewLimits
from ..tokens import DEFAULT_ENCODING, count_message, count_text
from .budget import utf8_len

# fetch(thread_id, max_seq, min_seq, limit) -> newest messages of that thread with
# min_seq < seq <= max_seq, newest first, at most ``limit`` of them.
FetchNewest = Callable[[str, int, int, int], Iterable[Message]]
# parent(thread_id) -> (parent_id, parent_seq) or None
ParentOf = Callable[[str], "tuple[str, int] | None"]

#: RAM a cached message costs beyond its text, for budgets: the struct (136 bytes), its
#: text's str header (49), its tuple slot and the allocator's headers; measured with
#: tracemalloc on agent_scale, where 160 left the cache's real RAM ~15 % over its budget.
MESSAGE_OVERHEAD = 224
#: A message over 1/CLIP_SHARE of the token or byte budget is shown as head + tail,
#: unless it is under MIN_CLIP_TOKENS and MIN_CLIP_BYTES (clipping it would not help).
CLIP_SHARE = 4
MIN_CLIP_TOKENS = 256
MIN_CLIP_BYTES = 1024
#: The newest messages within 1/WHOLE_SHARE of a view's token and byte budget keep their
#: images and files whole; once the view is full, older ones show them as text and facts.
WHOLE_SHARE = 2
#: Characters per token assumed when sizing a read from the byte budget (English text
#: averages about 4; fewer means one more read, more means reading a little past).
BYTES_PER_TOKEN_GUESS = 4
#: Characters per message assumed for the first read of a thread whose tokens were not counted.
BYTES_PER_MESSAGE_GUESS = 512
#: Messages read per statement at least, and at most.
MIN_CHUNK = 8
MAX_CHUNK = 256


def message_bytes(message: Message) -> int:
    """Size of a message in a prompt, in characters of text plus framing.

    At least a quarter of the tokens it can cost: see :attr:`ViewLimits.counts_tokens`.
    """
    size = len(message.content) + 16
    if message.parts:  # 4 characters per token they can cost: the bound above holds
        size += 4 * parts_tokens(message.parts, len)
    if message.reasoning:  # a reply of the running slice (views hold none): the adapter may send it
        size += len(message.reasoning)
    if message.name:
        size += len(message.name)
    for call in message.tool_calls:
        size += len(call.name) + len(call.arguments) + 16
    return size


def token_bound(message: Message) -> int:
    """Most tokens ``message`` can cost in a prompt, without a tokenizer: its UTF-8 bytes
    (a token is at least one byte) plus room for the framing of the message (16) and of
    each tool call (16), which :func:`~dormant.tokens.count_message` counts as at most 5
    and 8."""
    size = utf8_len(message.content) + 16
    if message.reasoning:
        size += utf8_len(message.reasoning)
    if message.name:
        size += utf8_len(message.name)
    for call in message.tool_calls:
        size += utf8_len(call.name) + utf8_len(call.arguments) + 16
    if message.parts:
        size += parts_tokens(message.parts, utf8_len)
    return size


def cost(message: Message) -> int:
    """Tokens ``message`` is taken to cost in a view that counts: its stored count, or
    :func:`token_bound` when it was stored uncounted (never less than its real count)."""
    return message.tokens or token_bound(message)


def message_tokens(message: Message, encoding: str = DEFAULT_ENCODING) -> int:
    """Tokens of ``message``: the stored count, or counted now if it never was (written
    before schema 2, or while its agent's limits made counts unnecessary)."""
    if message.tokens:
        return message.tokens
    counted = count_message(
        message.role, message.content, tool_calls=message.tool_calls, name=message.name, encoding=encoding
    )
    if message.parts:  # images by the tile rule, files by their text (dormant.parts.render)
        counted += parts_tokens(message.parts, lambda text: count_text(text, encoding))
    return counted


def with_count(message: Message, encoding: str) -> Message:
    """``message`` carrying its token count (see :func:`message_tokens`)."""
    if message.tokens:
        return message
    return msgspec.structs.replace(message, tokens=message_tokens(message, encoding))


def clip(message: Message, limits: ViewLimits) -> Message:
    """``message`` as a view shows it: counted if the limits count tokens, and cut to
    its head and tail when over 1/CLIP_SHARE of the token or byte budget."""
    max_bytes = clip_bytes(limits)
    if message.reasoning and message_bytes(message) > max_bytes:
        message = msgspec.structs.replace(message, reasoning=None)  # shown without it, not cut
    counting = limits.counts_tokens
    if counting:
        max_tokens = clip_tokens(limits)
        if cost(message) <= max_tokens and message_bytes(message) <= max_bytes:
            return message  # the stored count or the byte bound proves it small enough
        message = with_count(message, limits.encoding)
        if message.tokens <= max_tokens and message_bytes(message) <= max_bytes:
            return message
    elif message_bytes(message) <= max_bytes:
        return message
    if any(p.ref for p in message.parts):  # too large with its images and files: shown as their text
        return clip(demoted(message), limits)
    if message.parts:  # too large even so: shown without them, said so
        note = f"[{len(message.parts)} image(s) or file(s) of this message left out of the view]"
        content = f"{message.content}\n{note}" if message.content else note
        return clip(msgspec.structs.replace(message, content=content, parts=(), tokens=0), limits)
    text = message.content
    fixed_bytes = message_bytes(message) - len(text)
    keep = max(0, min(len(text), max_bytes - fixed_bytes - 96))
    if counting:
        # what clipping keeps whole (role, name, tool calls), counted; the text's own
        # count follows from the stored one, so the whole text is never counted again
        fixed_tokens = count_message(
            message.role, "", tool_calls=message.tool_calls, name=message.name, encoding=limits.encoding
        )
        # first guess from the text's characters per token, so counting rarely repeats
        per_token = len(text) / max(1, message.tokens - fixed_tokens)
        keep = min(keep, int((max_tokens - fixed_tokens - 40) * per_token * 0.95))
    while True:
        head, tail = text[: keep - keep // 2], text[len(text) - keep // 2 :] if keep // 2 else ""
        cut = len(text) - len(head) - len(tail)
        content = (
            f"{head}\n[... {cut} of {len(text)} characters cut from the middle of this message ...]\n{tail}"
        )
        tokens = fixed_tokens + count_text(content, limits.encoding) if counting else 0
        fits = fixed_bytes + len(content) <= max_bytes and (not counting or tokens <= max_tokens)
        if fits or keep == 0:
            return msgspec.structs.replace(message, content=content, tokens=tokens)
        keep = keep * 3 // 4 if keep > 64 else 0


def clip_bytes(limits: ViewLimits) -> int:
    """Size over which a message is shown clipped."""
    return max(limits.max_bytes // CLIP_SHARE, MIN_CLIP_BYTES)


def clip_tokens(limits: ViewLimits) -> int:
    """Tokens over which a message is shown clipped (under limits that count tokens)."""
    return max(limits.max_tokens // CLIP_SHARE, MIN_CLIP_TOKENS)


def _shown(
    message: Message, limits: ViewLimits, counting: bool, clip_at: int, clip_at_tokens: int
) -> tuple[Message, int, int]:
    """``clip(message, limits)``, its bytes and its weight in the view (:func:`cost` when
    ``counting``, else the stored count); the common case (nothing to clip, which its
    bytes and stored count or byte bound prove) decided from one size and one bound."""
    size = message_bytes(message)
    if not counting:
        if size <= clip_at:
            return message, size, message.tokens
    elif size <= clip_at:
        weight = cost(message)
        if weight <= clip_at_tokens:
            return message, size, weight
    shown = clip(message, limits)
    if shown is message:
        return message, size, cost(message) if counting else message.tokens
    return shown, message_bytes(shown), cost(shown) if counting else shown.tokens


def summary_tokens(summary: Summary | None, limits: ViewLimits) -> int:
    """Tokens of ``summary`` in a view of ``limits`` (0 when they do not count tokens)."""
    if summary is None or not limits.counts_tokens:
        return 0
    return summary.tokens or count_message("system", summary.content, encoding=limits.encoding)


def summary_cost(summary: Summary | None, limits: ViewLimits) -> int:
    """:func:`summary_tokens` without a tokenizer: the stored count or its byte bound."""
    if summary is None or not limits.counts_tokens:
        return 0
    return summary.tokens or utf8_len(summary.content) + 16


def needs_counts(load: SliceLoad, limits: ViewLimits) -> bool:
    """Whether a slice over ``load`` should count the messages it writes: only under
    limits that count, and only when the byte bounds of its view, summary and inputs
    no longer prove that its thread's next view fits the token budget (the counts are
    stored, so those views need not count them again)."""
    if not limits.counts_tokens:
        return False
    weight = load.usage[0] if load.usage is not None else sum(cost(m) for m in load.view)
    total = summary_cost(load.summary, limits) + weight
    total += sum(utf8_len(item.content) + 16 for item in load.inputs)
    return total > limits.max_tokens


def summary_bytes(summary: Summary | None) -> int:
    return len(summary.content) + 16 if summary is not None else 0


def build_view(
    thread: Thread,
    limits: ViewLimits,
    fetch: FetchNewest,
    parent_of: ParentOf,
    summary: Summary | None = None,
    made: dict[tuple[str, int], int] | None = None,
    usage: list[int] | None = None,
) -> tuple[tuple[Message, ...], int]:
    """The newest messages of ``thread`` and its ancestors that fit ``limits`` after
    ``summary``, oldest first, and how many of them (the oldest) are inherited.

    ``made``, when given, receives the counts this made of messages stored uncounted
    (``(thread_id, seq) -> tokens``, whole messages only), so they can be stored.
    ``usage``, when given, receives ``[tokens, bytes]``: what the view weighs against the
    budget (:func:`view_usage`), so a cache need not add it up again.

    Reads in chunks sized from the average message (the thread's, from its token
    count, then what the previous chunk held), so what is read stays within about
    one chunk of what fits.
    """
    picked: list[Message] = []  # newest first
    own = -1
    counting = limits.counts_tokens
    clip_at, clip_at_tokens = clip_bytes(limits), clip_tokens(limits)
    summary_weight = summary_cost(summary, limits)  # its byte bound, until counted exactly
    tokens = summary_weight
    summary_loose = counting and summary is not None and not summary.tokens
    loose: list[int] = []  # where in ``picked`` a message costs its byte bound (uncounted)
    loose_threads: dict[int, str] = {}  # their threads
    size = summary_bytes(summary)
    # per message, tokens and bytes: the thread's average where it was counted, else a guess
    avg_tokens = thread.tokens // thread.last_seq if thread.last_seq and thread.tokens else 0
    avg_bytes = avg_tokens * BYTES_PER_TOKEN_GUESS or BYTES_PER_MESSAGE_GUESS
    thread_id: str | None = thread.id
    max_seq = thread.last_seq
    full = False
    demoting = False  # the view is full: older messages show their parts as text and facts
    while thread_id is not None and not full:
        floor = summary.upto_seq if summary is not None and summary.thread_id == thread_id else 0
        while max_seq > floor and not full:
            room = limits.max_messages - len(picked)
            if room <= 0:
                # the count bound is reached: nothing older could join, so it is not read
                full = True
                break
            wanted = (limits.max_bytes - size) // max(1, avg_bytes)
            if counting and avg_tokens:
                wanted = min(wanted, (limits.max_tokens - tokens) // avg_tokens)
            limit = max(1, min(room, MAX_CHUNK, max(MIN_CHUNK, wanted + 2)))
            got = read_tokens = read_bytes = 0
            for message in fetch(thread_id, max_seq, floor, limit):
                got += 1
                max_seq = message.seq - 1
                source = demoted(message) if demoting else message
                shown, b, t = _shown(source, limits, counting, clip_at, clip_at_tokens)
                if counting and source is not message:  # counted now: never stored as its count
                    shown = with_count(shown, limits.encoding)
                    t = shown.tokens
                if (
                    counting
                    and tokens + t > limits.max_tokens
                    and (loose or summary_loose or not shown.tokens)
                ):
                    # the byte bounds no longer prove the fit: count, exactly, to decide
                    tightened = list(loose)
                    tokens += _tighten(picked, loose, limits.encoding)
                    if made is not None:
                        for i in tightened:
                            made[(loose_threads[i], picked[i].seq)] = picked[i].tokens
                    if summary_loose:
                        exact = summary_tokens(summary, limits)
                        tokens += exact - summary_weight
                        summary_weight = exact
                        summary_loose = False
                    shown = with_count(shown, limits.encoding)
                    t = shown.tokens
                if (
                    made is not None
                    and shown.tokens
                    and not message.tokens
                    and shown.content == message.content
                    and shown.parts is message.parts
                ):
                    made[(thread_id, message.seq)] = shown.tokens
                read_tokens += t
                read_bytes += b
                if (
                    len(picked) < limits.max_messages
                    and not demoting
                    and (tokens + t > limits.max_tokens or size + b > limits.max_bytes)
                ):
                    # full: old images and files leave before text of their age does
                    demoting = True
                    freed = _demote_old(picked, loose, limits)
                    tokens, size = tokens - freed[0], size - freed[1]
                    source = demoted(message)
                    if source is not message:
                        shown, b, t = _shown(source, limits, counting, clip_at, clip_at_tokens)
                        if counting:
                            shown = with_count(shown, limits.encoding)
                            t = shown.tokens
                if (
                    len(picked) >= limits.max_messages
                    or tokens + t > limits.max_tokens
                    or size + b > limits.max_bytes
                ):
                    full = True
                    break
                if counting and not shown.tokens:
                    loose_threads[len(picked)] = thread_id
                    loose.append(len(picked))
                picked.append(shown)
                tokens += t
                size += b
            if got < limit:
                break
            # what fits was underestimated: size the next read from what this one held
            avg_tokens, avg_bytes = read_tokens // got, max(1, read_bytes // got)
        if own < 0:
            own = len(picked)
        if full or floor:
            break
        link = parent_of(thread_id) if thread_id != thread.id else _link(thread)
        if link is None:
            break
        thread_id, max_seq = link
    picked.reverse()
    view = drop_orphans(picked)
    if usage is not None:
        # what the view weighs (see view_usage), from the running sums: less the summary's
        # part and the orphans dropped from its start
        tokens -= summary_weight
        size -= summary_bytes(summary)
        weigh = cost if counting else _stored
        for m in picked[: len(picked) - len(view)]:
            tokens -= weigh(m)
            size -= message_bytes(m)
        usage[:] = [tokens, size]
    return view, max(0, len(view) - own)


def _stored(message: Message) -> int:
    return message.tokens


def protected(messages: Sequence[Message], limits: ViewLimits) -> int:
    """How many of the newest of ``messages`` (oldest first) keep their images and files
    whole however full the view is: those within 1/:data:`WHOLE_SHARE` of the token and
    byte budget (at least the newest one)."""
    weigh = cost if limits.counts_tokens else _stored
    max_tokens, max_bytes = limits.max_tokens // WHOLE_SHARE, limits.max_bytes // WHOLE_SHARE
    tokens = size = kept = 0
    for m in reversed(messages):
        tokens += weigh(m)
        size += message_bytes(m)
        if kept and (tokens > max_tokens or size > max_bytes):
            break
        kept += 1
    return kept


def _demote_old(picked: list[Message], loose: list[int], limits: ViewLimits) -> tuple[int, int, int]:
    """Show the parts of the messages in ``picked`` (newest first) older than the
    :func:`protected` ones as their text and facts, in place; the (tokens, bytes) that
    freed and how many messages changed. A demoted message is counted at once (when the
    limits count): its stored count priced its images, and what the view counts of it is
    never stored."""
    counting = limits.counts_tokens
    weigh = cost if counting else _stored
    keep = protected(picked[::-1], limits)
    freed_tokens = freed_bytes = changed = 0
    for i in range(keep, len(picked)):
        m = picked[i]
        d = demoted(m)
        if d is m:
            continue
        if counting:
            d = with_count(d, limits.encoding)
            if i in loose:
                loose.remove(i)
        freed_tokens += weigh(m) - weigh(d)
        freed_bytes += message_bytes(m) - message_bytes(d)
        picked[i] = d
        changed += 1
    return freed_tokens, freed_bytes, changed


def _tighten(messages: list[Message], loose: list[int], encoding: str) -> int:
    """Count the messages at ``loose`` in place (emptying it); returns by how much their
    exact counts are under the byte bounds they were costed at (zero or negative)."""
    delta = 0
    for i in loose:
        counted = with_count(messages[i], encoding)
        delta += counted.tokens - token_bound(messages[i])
        messages[i] = counted
    loose.clear()
    return delta


def _link(thread: Thread) -> tuple[str, int] | None:
    return (thread.parent_id, thread.parent_seq) if thread.parent_id else None


def drop_orphans(messages: Sequence[Message]) -> tuple[Message, ...]:
    """Drop leading tool results whose assistant call is not in the view."""
    start = 0
    while start < len(messages) and messages[start].role == "tool":
        start += 1
    return tuple(messages[start:])


def extend_view(
    view: Sequence[Message],
    new: Sequence[Message],
    limits: ViewLimits,
    summary: Summary | None = None,
    usage: tuple[int, int] | None = None,
) -> tuple[Message, ...]:
    """The view :func:`build_view` would return once ``new`` is appended after ``view``.

    Both keep the longest suffix that fits the bounds, then drop leading orphan tool
    results; so extending a current view is exact. ``usage`` is ``view``'s
    :func:`view_usage` when the caller knows it (else it is added up here).
    """
    if usage is None:
        usage = view_usage(view, limits.counts_tokens)
    return _extend(view, new, limits, summary, usage)[0]


def view_usage(view: Sequence[Message], counting: bool = True) -> tuple[int, int]:
    """(tokens, bytes) of ``view``: stored counts, and byte bounds where uncounted when
    its limits count tokens (else the stored counts alone: nothing is compared to them)."""
    tokens = sum(cost(m) for m in view) if counting else sum(m.tokens for m in view)
    return tokens, sum(message_bytes(m) for m in view)


def _extend(
    view: Sequence[Message],
    new: Sequence[Message],
    limits: ViewLimits,
    summary: Summary | None,
    usage: tuple[int, int],
) -> tuple[tuple[Message, ...], tuple[int, int], bool]:
    """:func:`extend_view` plus the (tokens, bytes) of the result, given those of ``view``,
    and whether the result is what :func:`build_view` gives (False: a cache rebuilds it)."""
    combined = list(view)
    counting = limits.counts_tokens
    extra = summary_cost(summary, limits)
    tokens = usage[0] + extra
    size = usage[1] + summary_bytes(summary)
    clip_at, clip_at_tokens = clip_bytes(limits), clip_tokens(limits)
    weigh = cost if counting else _stored
    for m in new:
        shown, b, t = _shown(m, limits, counting, clip_at, clip_at_tokens)
        combined.append(shown)
        tokens += t
        size += b
    if counting and tokens > limits.max_tokens:
        # the byte bounds no longer prove the fit: count what was not, exactly, to decide
        loose = [i for i, m in enumerate(combined) if not m.tokens]
        tokens += _tighten(combined, loose, limits.encoding)
        exact = summary_tokens(summary, limits)
        tokens += exact - extra
        extra = exact
    demoting = False
    if tokens > limits.max_tokens or size > limits.max_bytes:
        # full: old images and files leave before text of their age does
        picked = combined[::-1]
        freed = _demote_old(picked, [], limits)
        combined = picked[::-1]
        tokens, size, demoting = tokens - freed[0], size - freed[1], freed[2] > 0
    start = 0
    while start < len(combined) and (
        len(combined) - start > limits.max_messages or tokens > limits.max_tokens or size > limits.max_bytes
    ):
        tokens -= weigh(combined[start])
        size -= message_bytes(combined[start])
        start += 1
    while start < len(combined) and combined[start].role == "tool":
        tokens -= weigh(combined[start])
        size -= message_bytes(combined[start])
        start += 1
    out = tuple(combined[start:])
    # a rebuild from the store would demote the same parts only if the view was full, and
    # may then reach older messages than this one holds: exact only with no part to demote
    # (the walk for the protected ones only when some message has parts: most have none)
    exact = not demoting
    if exact and any(m.parts for m in out):
        keep = protected(out, limits)
        exact = not any(p.ref for m in out[: len(out) - keep] for p in m.parts)
    return out, (tokens - extra, size - summary_bytes(summary)), exact
