"""How a :class:`~dormant.models.base.ModelRequest` becomes Chat Completions messages.

Pure logic, apart from HTTP so it can be tested alone. Servers differ in what their
chat templates accept, so the mapping follows a :class:`Dialect` the adapter declares:

* one system message only, at the start: the compaction summary goes inside it
  (Qwen's template refuses a system message anywhere else);
* an assistant reply that was empty is sent as ``""``, never ``null`` without tool
  calls (OpenAI refuses that with a 400, which would break the thread for good);
* with ``strict_alternation`` (Mistral, Gemma), consecutive user or assistant
  messages are merged and the conversation after the system message starts with a
  user message;
* tool-call ids: the store keeps a unique internal id (``<model id>.<seq>.<index>``,
  see :func:`dormant.slices.step.call_id`); the model is shown its own id where that is
  unique in the view and of the form the server accepts, else a compliant id derived
  from the internal one (stable, so prompt caches still hit);
* reasoning (stored apart from the answer) is never sent back, unless the dialect
  names the field a server wants it in (``reasoning_field``; interleaved thinking in
  a tool-call loop, e.g. DeepSeek's or Kimi's thinking models).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from ..errors import UsageError
from ..parts.render import content_parts, placeholder, text_of
from ..records import Message, Part
from .base import ModelRequest

__all__ = ["DIALECTS", "SUMMARY_PREFIX", "Dialect", "dialect_for", "wire_ids", "wire_messages"]

#: How a compaction summary is introduced inside the system message.
SUMMARY_PREFIX = "Summary of the earlier part of this conversation (older messages are not shown):\n"
#: The user message put first when a strict template needs one and the view starts otherwise.
CONTINUED = "(The conversation continues.)"

IdForm = Literal["openai", "mistral"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Dialect:
    """What an OpenAI-compatible server's chat template and API accept.

    ``output_cap``: the body field the output cap goes in (``max_completion_tokens`` for
    OpenAI, ``max_tokens`` elsewhere, ``""`` to send none). ``strict_alternation``: user
    and assistant must alternate. ``tool_call_ids``: ``"openai"`` (at most 40
    characters) or ``"mistral"`` (exactly 9 letters or digits). ``stream_usage``: ask
    for usage in the stream (``stream_options.include_usage``). ``reasoning_field``: the
    field of an assistant message the server wants that message's reasoning back in
    (``"reasoning_content"``), or ``""``: never sent back. Only the reasoning of the
    running slice's replies is at hand (a view loaded from the store holds none).
    """

    name: str
    output_cap: str = "max_tokens"
    strict_alternation: bool = False
    tool_call_ids: IdForm = "openai"
    stream_usage: bool = True
    reasoning_field: str = ""
    #: the model sees images: a message's image parts go as ``image_url`` content parts
    #: (data URIs); otherwise as text placeholders (:func:`dormant.parts.placeholder`)
    vision: bool = False
    #: with ``vision``, PDF parts go as ``file`` content parts (else as their text)
    files: bool = False
    #: the ``detail`` of ``image_url`` parts (``low``, ``high``, ``auto``), and of their cost
    image_detail: str = "auto"


#: The named dialects; ``"auto"`` picks ``openai`` for api.openai.com, else ``generic``.
DIALECTS: dict[str, Dialect] = {
    "openai": Dialect(name="openai", output_cap="max_completion_tokens", vision=True, files=True),
    "vision": Dialect(name="vision", vision=True),
    "generic": Dialect(name="generic"),
    "mistral": Dialect(name="mistral", strict_alternation=True, tool_call_ids="mistral"),
    "strict": Dialect(name="strict", strict_alternation=True),
    "reasoning": Dialect(name="reasoning", reasoning_field="reasoning_content"),
}


def dialect_for(name: str | Dialect, base_url: str) -> Dialect:
    """The dialect called ``name`` (or ``"auto"``: chosen by ``base_url``'s host).

    Raises :class:`UsageError` for an unknown name.
    """
    if isinstance(name, Dialect):
        return name
    if name == "auto":
        host = (urlsplit(base_url).hostname or "").lower()
        return DIALECTS["openai" if host == "api.openai.com" else "generic"]
    try:
        return DIALECTS[name]
    except KeyError:
        known = ", ".join(["auto", *DIALECTS])
        raise UsageError(f"unknown model dialect {name!r} (known: {known})") from None


_SUFFIX = re.compile(r"^(.+)\.\d+\.\d+$")
_MISTRAL_ID = re.compile(r"^[A-Za-z0-9]{9}$")
_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def model_id(internal: str) -> str:
    """The id the model gave a call, from its internal id (``<model id>.<seq>.<index>``)."""
    match = _SUFFIX.match(internal)
    return match.group(1) if match else internal


def compliant(call_id: str, form: IdForm) -> bool:
    """Whether a server of id ``form`` accepts ``call_id``."""
    if form == "mistral":
        return _MISTRAL_ID.match(call_id) is not None
    return 0 < len(call_id) <= 40 and call_id.isprintable() and " " not in call_id


def generated(internal: str, form: IdForm, salt: int = 0) -> str:
    """A compliant id derived from ``internal`` (the same one every time)."""
    digest = hashlib.sha256(f"{salt}:{internal}".encode()).digest()
    if form == "mistral":
        number = int.from_bytes(digest[:8], "big")
        chars = []
        for _ in range(9):
            number, rest = divmod(number, 62)
            chars.append(_ALPHABET[rest])
        return "".join(chars)
    return "call_" + digest[:12].hex()


def wire_ids(messages: Iterable[Message], form: IdForm) -> dict[str, str]:
    """The id the model is shown for each internal tool-call id in ``messages``.

    The model's own id where it is unique among the view's calls and compliant;
    else :func:`generated` (salted again in the unlikely case it collides).
    """
    internal: list[str] = []
    seen: set[str] = set()
    for message in messages:
        ids = [call.id for call in message.tool_calls]
        if message.role == "tool" and message.tool_call_id:
            ids.append(message.tool_call_id)
        for call_id in ids:
            if call_id not in seen:
                seen.add(call_id)
                internal.append(call_id)
    own = {call_id: model_id(call_id) for call_id in internal}
    counts = Counter(own.values())
    shown: dict[str, str] = {}
    for call_id in internal:
        candidate = own[call_id]
        if counts[candidate] == 1 and compliant(candidate, form):
            shown[call_id] = candidate
    taken = set(shown.values())
    for call_id in internal:
        if call_id in shown:
            continue
        salt = 0
        candidate = generated(call_id, form)
        while candidate in taken:
            salt += 1
            candidate = generated(call_id, form, salt)
        shown[call_id] = candidate
        taken.add(candidate)
    return shown


def _message(message: Message, ids: dict[str, str], dialect: Dialect) -> dict[str, Any]:
    """One history message in Chat Completions form."""
    reasoning_field = dialect.reasoning_field
    if message.parts and message.role == "user":
        if dialect.vision:
            return {"role": "user", "content": content_parts(message, dialect.image_detail, dialect.files)}
        return {"role": "user", "content": text_of(message)}
    if message.role == "assistant":
        out = _assistant(message, ids)
        if reasoning_field and message.reasoning:
            out[reasoning_field] = message.reasoning
        return out
    if message.role == "tool":
        call_id = message.tool_call_id or ""
        content = _tool_text(message, dialect) if message.parts else message.content
        return {"role": "tool", "tool_call_id": ids.get(call_id, call_id), "content": content}
    return {"role": "user", "content": message.content}


def _sent_as_file(part: Part, dialect: Dialect) -> bool:
    return dialect.vision and dialect.files and part.kind == "file" and part.media_type == "application/pdf"


def _tool_text(message: Message, dialect: Dialect) -> str:
    """A tool result's text and a placeholder per part (a PDF sent as a file part: its
    first line only, its text is in the file)."""
    shown = [
        placeholder(p).split("\n", 1)[0] if _sent_as_file(p, dialect) else placeholder(p)
        for p in message.parts
    ]
    return "\n\n".join([message.content, *shown]).strip()


def tool_media(message: Message, dialect: Dialect) -> list[dict[str, Any]]:
    """The image (and, where the dialect takes files, PDF) content parts of a tool result,
    for a model that sees images: a tool message holds text only, so they go in a user
    message after the call's results, the tool message naming each by its placeholder."""
    if not (message.role == "tool" and message.parts and dialect.vision):
        return []
    shown = Message(seq=message.seq, role="user", content="", parts=message.parts)
    parts = content_parts(shown, dialect.image_detail, dialect.files)
    return [part for part in parts if part["type"] != "text"]


def _assistant(message: Message, ids: dict[str, str]) -> dict[str, Any]:
    if not message.tool_calls:
        return {"role": "assistant", "content": message.content}
    return {
        "role": "assistant",
        "content": message.content or None,
        "tool_calls": [
            {
                "id": ids[call.id],
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in message.tool_calls
        ],
    }


def _alternate(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge consecutive user (or plain assistant) messages; start with a user message."""
    out: list[dict[str, Any]] = []
    for message in messages:
        previous = out[-1] if out else None
        role = message["role"]
        if (
            previous is not None
            and previous["role"] == role
            and role in ("user", "assistant")
            and "tool_calls" not in previous
        ):
            merged = dict(message)
            if isinstance(previous["content"], list) or isinstance(message["content"], list):
                merged["content"] = [*_listed(previous["content"]), *_listed(message["content"])]
                out[-1] = merged
                continue
            merged["content"] = "\n\n".join(
                part for part in (previous["content"], message["content"]) if part
            ) or ("" if "tool_calls" not in message else None)
            out[-1] = merged
            continue
        if role != "system" and (previous is None or previous["role"] == "system") and role != "user":
            out.append({"role": "user", "content": CONTINUED})
        out.append(message)
    return out


def _listed(content: Any) -> list[Any]:
    if isinstance(content, list):
        return content
    return [{"type": "text", "text": content}] if content else []


def wire_messages(request: ModelRequest, dialect: Dialect) -> list[dict[str, Any]]:
    """The ``messages`` of the request body for ``request`` under ``dialect``."""
    system = request.system
    if request.summary:
        system = (
            f"{system}\n\n{SUMMARY_PREFIX}{request.summary}" if system else SUMMARY_PREFIX + request.summary
        )
    ids = wire_ids(request.messages, dialect.tool_call_ids)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    media: list[dict[str, Any]] = []  # of the tool results just shown, once they all are
    for message in request.messages:
        if media and message.role != "tool":
            messages.append({"role": "user", "content": media})
            media = []
        messages.append(_message(message, ids, dialect))
        media += tool_media(message, dialect)
    if media:
        messages.append({"role": "user", "content": media})
    return _alternate(messages) if dialect.strict_alternation else messages
