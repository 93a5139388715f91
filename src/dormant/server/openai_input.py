"""The text of an OpenAI message's content, and nothing silently dropped.

A content part this server can take is text (``text``, ``input_text``, ``output_text``,
``refusal``); any other part (``image_url``, ``input_image``, ``input_audio``,
``input_file``, ...) is refused with 400 naming the part and where it was, because a
reply to a message whose image the agent never saw would be a wrong answer given
with confidence.

:func:`client_tools` checks the tools a client declares for itself (the one check of
both endpoints).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import UsageError
from ..runtime import Runtime
from ..tools import external

#: Content part types whose text is taken.
TEXT_PARTS = frozenset({"text", "input_text", "output_text", "refusal"})


def content_text(content: str | list[Any] | None, where: str) -> str:
    """The text of ``content`` (a string or a list of parts), its text parts joined.

    UsageError (400) for a part that is not text, naming it by ``where``.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for index, part in enumerate(content):
        if isinstance(part, str):
            texts.append(part)
            continue
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in TEXT_PARTS:
            shown = repr(kind) if isinstance(kind, str) else "without a type"
            raise UsageError(
                f"{where}.content.{index}: a content part of type {shown} cannot be taken: this "
                "server's agents read text only (send text parts)"
            )
        text = part.get("text", part.get("refusal", ""))
        if not isinstance(text, str):
            raise UsageError(f"{where}.content.{index}: the text of a {kind} part must be a string")
        texts.append(text)
    return "".join(texts)


def client_tools(rt: Runtime, agent: str, schemas: Sequence[external.Schema]) -> tuple[str, frozenset[str]]:
    """A request's client tools (``schemas``, from :func:`~dormant.tools.external.from_chat`
    or ``from_responses``) as stored on its inputs, and their names. UsageError (400) for
    a name of one of the agent's own tools, too many or too large schemas, or schemas that
    would take over half of the agent's prompt budget (:mod:`dormant.tools.external`)."""
    own = rt.agents[agent].toolbox.names()
    text = external.declare(schemas, own, agent)
    limits = rt.limits.get(agent)
    if limits is not None:
        external.check_budget(limits, schemas, agent)
    return text, external.names(schemas)
