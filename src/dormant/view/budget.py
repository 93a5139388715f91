"""The prompt budget: one rule for everything a model request holds.

A request must fit what the model's window leaves once the reply is reserved, as a
server counts it::

    system message + summary + history + the slice's own new messages (inputs, replies,
    inline tool results) + tool schemas (as JSON) + per-message framing + reply priming
        <= (context_window - max_output_tokens) * (1 - margin)

The margin (``Settings.prompt_margin``, 2 % by default) absorbs what a server's chat
template counts differently. The constant part (system message, tool schemas, reply
priming, the summary's framing, and per-message framing beyond what stored counts
include) is taken off first; what is left is :attr:`ViewLimits.max_tokens`, shared by
the summary, the history and the slice's new messages. The view builder
(:mod:`dormant.view.builder`) keeps history within it, and :func:`dormant.view.builder.extend_view`
keeps every request within it as the slice adds messages: each message over a share
of the budget is shown as head + tail, and the oldest history drops out first, never
a call without its results.

Counting only where a count can decide something: a token is at least one UTF-8
byte, so a text's byte length bounds its tokens. The constant part is bounded by its
bytes first and counted exactly only when that bound could matter (when the byte cap
of a view could pass its token budget, :attr:`ViewLimits.counts_tokens`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from ..errors import UsageError
from ..models.base import OPENAI_CHAT, ChatOverhead
from ..records import ViewLimits
from ..tokens import DEFAULT_ENCODING, MESSAGE_OVERHEAD, count_text

if TYPE_CHECKING:
    from ..agent import Agent
    from ..config import Settings

__all__ = [
    "DEFAULT_MAX_OUTPUT",
    "DEFAULT_WINDOW",
    "EXACT_FIXED_SHARE",
    "MIN_VIEW_TOKENS",
    "ROLE_TOKENS",
    "fixed_tokens",
    "limits_for",
    "prompt_tokens",
    "schemas_text",
    "utf8_len",
    "view_limits",
]

#: A model that does not declare its window is assumed to have this one (tokens).
DEFAULT_WINDOW: Final = 128_000
#: A model that does not declare its output reserve is assumed to keep this much.
DEFAULT_MAX_OUTPUT: Final = 4_096
#: The smallest history budget a runtime accepts.
MIN_VIEW_TOKENS: Final = 256
#: The constant part is counted exactly (loading the tokenizer) only when its byte bound
#: is over 1/EXACT_FIXED_SHARE of the prompt budget: below, exactness would win history
#: less than that share of its budget.
EXACT_FIXED_SHARE: Final = 32
#: Tokens of a role name ("system", "user", "assistant", "tool": one each in every
#: encoding dormant knows); bounded by bytes where the tokenizer is not loaded.
ROLE_TOKENS: Final = 1


def utf8_len(text: str) -> int:
    """UTF-8 bytes of ``text``: an upper bound on its tokens in any byte-level BPE encoding.

    Free for ASCII text (``str.isascii`` reads a flag); other text is encoded once.
    Lone surrogates count as the three bytes of the replacement character a tokenizer
    sees instead.
    """
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def schemas_text(schemas: Sequence[dict[str, Any]]) -> str:
    """The tool schemas as the budget counts them: JSON, as a chat server renders them
    into the prompt (``""`` when there are none)."""
    return json.dumps(list(schemas)) if schemas else ""


def prompt_tokens(window: int, max_output: int, margin: float) -> int:
    """Tokens a whole request may hold: the window less the reply's reserve and the margin."""
    return int((window - max_output) * (1.0 - margin))


def fixed_tokens(
    system: str,
    schemas: str,
    overhead: ChatOverhead,
    max_messages: int,
    *,
    encoding: str | None,
) -> int:
    """Tokens of the constant part of every request.

    The system message (framing, role, text), the tool schemas' JSON, the reply
    priming, the summary's framing, and, for a format that frames a message in more
    than the :data:`~dormant.tokens.MESSAGE_OVERHEAD` stored counts include, the
    difference for each of the ``max_messages`` a view may hold. With ``encoding=None``
    the texts are bounded by their UTF-8 bytes (no tokenizer); else counted exactly.
    """

    def tokens(text: str) -> int:
        if not text:
            return 0
        return utf8_len(text) if encoding is None else count_text(text, encoding)

    total = overhead.reply + overhead.summary + tokens(schemas)
    if system:
        total += overhead.message + ROLE_TOKENS + tokens(system)
    return total + max(0, overhead.message - MESSAGE_OVERHEAD) * max_messages


def view_limits(
    *,
    window: int,
    max_output: int,
    system: str,
    schemas: Sequence[dict[str, Any]] = (),
    overhead: ChatOverhead = OPENAI_CHAT,
    encoding: str = DEFAULT_ENCODING,
    max_messages: int = 64,
    max_bytes: int = 256 * 1024,
    max_tokens: int = 0,
    margin: float = 0.02,
    ratio: float = 1.0,
) -> ViewLimits:
    """The limits of a view and of every request built on it, under the budget rule.

    ``max_tokens`` (0: no cap) caps what the window leaves. The constant part is
    bounded by its bytes; it is counted, to give history every token it may have, only
    when the byte cap could then pass the token budget (:attr:`ViewLimits.counts_tokens`)
    and the bound is over 1/:data:`EXACT_FIXED_SHARE` of the prompt budget. Raises
    :class:`UsageError` when fewer than :data:`MIN_VIEW_TOKENS` are left for history and
    new messages.

    ``ratio`` (at least 1) is what the model's own tokens cost against ``encoding``'s
    (:mod:`dormant.view.ratio`): the prompt budget is divided by it, so counts stay in
    ``encoding`` and a byte still bounds a token.
    """
    if not ratio >= 1.0:
        raise UsageError(f"a token ratio must be at least 1, not {ratio}")
    prompt = int(prompt_tokens(window, max_output, margin) / ratio)
    text = schemas_text(schemas)

    def left(encoding_used: str | None) -> int:
        room = prompt - fixed_tokens(system, text, overhead, max_messages, encoding=encoding_used)
        return min(room, max_tokens) if max_tokens else room

    limits = ViewLimits(
        max_messages=max_messages, max_bytes=max_bytes, max_tokens=left(None), encoding=encoding
    )
    bound = fixed_tokens(system, text, overhead, max_messages, encoding=None)
    if limits.counts_tokens and bound > prompt // EXACT_FIXED_SHARE:
        limits = ViewLimits(
            max_messages=max_messages, max_bytes=max_bytes, max_tokens=left(encoding), encoding=encoding
        )
    if limits.max_tokens < MIN_VIEW_TOKENS:
        raise UsageError(
            f"the model's window of {window} tokens"
            + (f" (its tokens {ratio:g}x dormant's count)" if ratio > 1.0 else "")
            + f" leaves {limits.max_tokens} for history once its "
            f"output ({max_output}), the {margin:.0%} margin, the system prompt and tool schemas are "
            f"counted; at least {MIN_VIEW_TOKENS} needed"
        )
    return limits


def limits_for(agent: Agent, settings: Settings, ratio: float = 1.0) -> ViewLimits:
    """:func:`view_limits` for an :class:`~dormant.agent.Agent` under runtime ``settings``.

    The model declares ``context_window``, ``max_output_tokens``, ``encoding`` and its
    ``chat_overhead`` (defaults for a model that declares none: 128k, 4,096, o200k_base,
    :data:`OPENAI_CHAT`). ``ratio``: the model's learned token ratio
    (:mod:`dormant.view.ratio`). Raises :class:`UsageError` naming the agent when its
    budget is too small.
    """
    model = agent.model
    try:
        return view_limits(
            window=getattr(model, "context_window", DEFAULT_WINDOW),
            max_output=getattr(model, "max_output_tokens", DEFAULT_MAX_OUTPUT),
            system=agent.system_prompt,
            schemas=agent.toolbox.schemas,
            overhead=getattr(model, "chat_overhead", OPENAI_CHAT),
            encoding=getattr(model, "encoding", DEFAULT_ENCODING),
            max_messages=settings.view_messages,
            max_bytes=settings.view_bytes,
            max_tokens=settings.view_tokens,
            margin=settings.prompt_margin,
            ratio=ratio,
        )
    except UsageError as exc:
        raise UsageError(f"agent {agent.name!r}: {exc}") from None
