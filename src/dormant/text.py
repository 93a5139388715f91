"""Text on its way to the store: made storable, and cut to a byte limit.

Model replies and tool outputs are text dormant did not write. Two things in such
text break a store or the code before it: ``\\x00`` (PostgreSQL's text and jsonb
refuse it; SQLite takes it, so the backends would disagree) and lone surrogates
(``os.listdir`` gives them for file names that are not UTF-8; ``str.encode()``
raises on them). :func:`clean` removes the first and replaces the second with
U+FFFD, so both backends store the same text; :func:`truncate` never raises.
"""

from __future__ import annotations

import re

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
#: What a lone surrogate becomes.
REPLACEMENT = "\ufffd"


def clean(text: str) -> str:
    """``text`` without NUL characters and with lone surrogates replaced by U+FFFD.

    Text that needs neither is returned as is (the common case costs one scan).
    """
    if "\x00" in text:
        text = text.replace("\x00", "")
    if not text.isascii() and _LONE_SURROGATE.search(text):
        text = _LONE_SURROGATE.sub(REPLACEMENT, text)
    return text


def truncate(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, with a note of what was cut.

    The text is cleaned first (see :func:`clean`), so this never raises.
    """
    text = clean(text)
    data = text.encode()
    if len(data) <= limit:
        return text
    note = f"\n[... output truncated: {len(data)} bytes, first {limit - 100} shown]"
    return data[: max(0, limit - 100)].decode(errors="ignore") + note
