"""Identity binding: turn identity parts (phone, device, session, ...) into one binding key.

``bind(parts)`` normalizes each part (a phone loses its punctuation, emails and
names are case-folded, ...) and hashes the sorted ``name=value`` lines with
sha256 behind a version prefix, so the key reveals nothing and a later change of
the normalization gets a new prefix instead of silently new keys.

A partial identity (for example just the phone) is never matched against keys:
the store keeps an explicit link table from each part's own hash to the keys
bound with it (:func:`part_hashes`), and looks up there — never a ``LIKE``.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Mapping

from ..errors import InvalidInput

#: Prefix of every key made by this version of the normalization.
BINDING_VERSION = "b1"
_KEY_RE = re.compile(r"^b[0-9]+_[0-9a-f]{64}$")
_PART_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
MAX_PART_CHARS = 256
MAX_PARTS = 16


def normalize_phone(value: str) -> str:
    """Digits only, keeping one leading ``+``; ``00`` as an international prefix becomes ``+``."""
    raw = value.strip()
    digits = re.sub(r"\D", "", raw)
    if raw.startswith("+"):
        return "+" + digits
    if digits.startswith("00"):
        return "+" + digits[2:]
    return digits


def normalize_part(name: str, value: str) -> str:
    """The canonical text of one identity part; raises :class:`InvalidInput` when it is empty."""
    if name == "phone":
        out = normalize_phone(value)
    else:
        out = " ".join(unicodedata.normalize("NFKC", value).split())
        if name in ("email", "name", "device", "session"):
            out = out.casefold()
    if not out or out == "+":
        raise InvalidInput(f"identity part {name!r} is empty after normalization")
    return out


def _check_parts(parts: Mapping[str, str]) -> list[tuple[str, str]]:
    if not parts:
        raise InvalidInput("bind needs at least one identity part")
    if len(parts) > MAX_PARTS:
        raise InvalidInput(f"at most {MAX_PARTS} identity parts, got {len(parts)}")
    out = []
    for name, value in parts.items():
        if not _PART_NAME_RE.match(name):
            raise InvalidInput(f"identity part name {name!r} must match {_PART_NAME_RE.pattern}")
        if not isinstance(value, str) or len(value) > MAX_PART_CHARS:
            raise InvalidInput(f"identity part {name!r} must be a string of at most {MAX_PART_CHARS} chars")
        out.append((name, normalize_part(name, value)))
    return sorted(out)


def bind(parts: Mapping[str, str]) -> str:
    """The binding key of an identity: ``b1_`` + sha256 of its sorted, normalized parts.

    The same person with the same parts always gets the same key; ``{"phone": "+1 555-0100"}``
    and ``{"phone": "+15550100"}`` are the same identity; adding a device makes a
    different key (two people sharing a phone on different devices stay apart).
    """
    lines = "\n".join(f"{name}={value}" for name, value in _check_parts(parts))
    return f"{BINDING_VERSION}_{hashlib.sha256(lines.encode()).hexdigest()}"


def part_hashes(parts: Mapping[str, str]) -> dict[str, str]:
    """For the link table: each part's own hash (``name`` → sha256 of ``name=value``)."""
    return {
        name: hashlib.sha256(f"{name}={value}".encode()).hexdigest() for name, value in _check_parts(parts)
    }


def part_hash(name: str, value: str) -> str:
    """The hash of one identity part, to look up every key linked to it (e.g. a phone)."""
    return part_hashes({name: value})[name]


def check_key(key: str) -> str:
    """Return ``key`` if it has the shape of a binding key; raise :class:`InvalidInput` otherwise."""
    if not isinstance(key, str) or not _KEY_RE.match(key):
        raise InvalidInput(f"not a binding key: {key!r:.80}")
    return key
