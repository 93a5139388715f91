"""Identity binding: turn identity parts (phone, device, session, ...) into one binding key.

``bind(parts, secret=, tenant=)`` normalizes each part (a phone loses its
punctuation, emails and names are case-folded, ...) and takes the HMAC-SHA256 of
the tenant and the sorted ``name=value`` lines under the deployment's binding
secret, behind a version prefix (``b2_``). Without the secret a key cannot be
recomputed from a guessed phone number, so a copy of the store reveals nothing;
the tenant in the message makes the same phone two keys in two tenants. A later
change of the scheme gets a new prefix instead of silently new keys.

Keys made before (``b1_``: a plain sha256 of the parts, the same in every tenant)
are still accepted as keys and made by :func:`legacy_bind`, only so that
:meth:`~dormant.memory.core.MemoryCore.bind` can move an old key's memories to the
new key (see ``docs/memory.md``, "Binding keys and scope").

A partial identity (for example just the phone) is never matched against keys:
the store keeps an explicit link table from each part's own hash to the keys
bound with it (:func:`part_hashes`), and looks up there — never a ``LIKE``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import unicodedata
from collections.abc import Mapping

from ..errors import InvalidInput

#: Prefix of every key made by this version of the scheme (HMAC-SHA256 under the secret).
BINDING_VERSION = "b2"
#: Prefix of the keys made before: sha256 of the parts, no secret, no tenant.
LEGACY_VERSION = "b1"
#: A binding secret from ``DORMANT_BINDING_SECRET`` must be at least this long.
MIN_SECRET_CHARS = 32
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


def check_secret(secret: str) -> bytes:
    """The binding secret as bytes; :class:`InvalidInput` when it is shorter than
    :data:`MIN_SECRET_CHARS` (a short secret can be guessed, and with it every phone)."""
    if not isinstance(secret, str) or len(secret.strip()) < MIN_SECRET_CHARS:
        raise InvalidInput(f"a binding secret is at least {MIN_SECRET_CHARS} characters")
    return secret.strip().encode()


def _mac(secret: bytes, message: str) -> str:
    return hmac.new(secret, message.encode(), hashlib.sha256).hexdigest()


def bind(parts: Mapping[str, str], *, secret: bytes, tenant: str) -> str:
    """The binding key of an identity in ``tenant``: ``b2_`` + HMAC-SHA256 under ``secret``
    of the tenant and the sorted, normalized parts.

    The same person with the same parts always gets the same key in one tenant (and a
    different one in another); ``{"phone": "+1 555-0100"}`` and ``{"phone": "+15550100"}``
    are the same identity; adding a device makes a different key (two people sharing a
    phone on different devices stay apart). :class:`InvalidInput` for bad parts.
    """
    if not secret:
        raise InvalidInput("a binding key needs the binding secret")
    lines = "\n".join(f"{name}={value}" for name, value in _check_parts(parts))
    message = "key\0" + tenant + "\0" + lines
    return f"{BINDING_VERSION}_{_mac(secret, message)}"


def legacy_bind(parts: Mapping[str, str]) -> str:
    """The key the previous scheme gave ``parts`` (``b1_`` + sha256 of the sorted, normalized
    parts): only to find and move an old store's memories to :func:`bind`'s key."""
    lines = "\n".join(f"{name}={value}" for name, value in _check_parts(parts))
    return f"{LEGACY_VERSION}_{hashlib.sha256(lines.encode()).hexdigest()}"


def part_hashes(parts: Mapping[str, str], *, secret: bytes, tenant: str) -> dict[str, str]:
    """For the link table: each part's own keyed hash (``name`` → HMAC-SHA256 under
    ``secret`` of the tenant and ``name=value``), so a phone's links reveal no phone."""
    if not secret:
        raise InvalidInput("a part hash needs the binding secret")
    prefix = "part\0" + tenant + "\0"
    return {name: _mac(secret, f"{prefix}{name}={value}") for name, value in _check_parts(parts)}


def part_hash(name: str, value: str, *, secret: bytes, tenant: str) -> str:
    """The keyed hash of one identity part, to look up every key linked to it (e.g. a phone)."""
    return part_hashes({name: value}, secret=secret, tenant=tenant)[name]


def legacy_part_hashes(parts: Mapping[str, str]) -> dict[str, str]:
    """The previous scheme's part hashes (sha256 of ``name=value``): the link rows an old
    store holds, found and replaced when their identity is next bound."""
    return {
        name: hashlib.sha256(f"{name}={value}".encode()).hexdigest() for name, value in _check_parts(parts)
    }


def check_key(key: str) -> str:
    """Return ``key`` if it has the shape of a binding key; raise :class:`InvalidInput` otherwise."""
    if not isinstance(key, str) or not _KEY_RE.match(key):
        raise InvalidInput(f"not a binding key: {key!r:.80}")
    return key
