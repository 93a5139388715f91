"""Clash-free names for MCP tools as the model sees them: ``<server>__<tool>``.

Model APIs accept function names of ``[A-Za-z0-9_-]{1,64}``; an MCP tool's name may be
longer or hold other characters. The name shown is the server's name, ``__``, and the
tool's name with every other character replaced by ``_``; when that is too long or
two tools of a server would get the same name, a short hash of the original name
makes it unique. The mapping is a pure function of (server, tool, the other names).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

SEPARATOR = "__"
MAX_NAME = 64
_BAD = re.compile(r"[^A-Za-z0-9_-]")


def _hashed(server: str, tool: str, room: int) -> str:
    digest = hashlib.sha256(tool.encode()).hexdigest()[:8]
    safe = _BAD.sub("_", tool)[: max(room - 9, 1)]
    return f"{server}{SEPARATOR}{safe}_{digest}"


def model_names(server: str, tools: Iterable[str]) -> dict[str, str]:
    """The model-facing name of each of ``server``'s ``tools`` (original name → shown
    name): unique, at most :data:`MAX_NAME` characters, ``[A-Za-z0-9_-]`` only."""
    names = list(dict.fromkeys(tools))
    room = MAX_NAME - len(server) - len(SEPARATOR)
    plain = {tool: f"{server}{SEPARATOR}{_BAD.sub('_', tool)}" for tool in names}
    counts: dict[str, int] = {}
    for shown in plain.values():
        counts[shown] = counts.get(shown, 0) + 1
    out: dict[str, str] = {}
    for tool in names:
        shown = plain[tool]
        exact = shown == f"{server}{SEPARATOR}{tool}"
        if len(shown) > MAX_NAME or (counts[shown] > 1 and not exact) or not tool:
            shown = _hashed(server, tool, room)
        out[tool] = shown
    return out
