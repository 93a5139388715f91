"""Request fingerprints: what makes a retry with the same ``Idempotency-Key`` the same request.

A fingerprint is a hash of the request body's canonical JSON (keys sorted, no
whitespace, defaults filled in by the schema), so it is the same for the same
request however the client spelled it, and at most 71 characters however large the
body. It is stored with the input's dedup key (:attr:`dormant.records.NewInput.fingerprint`),
in the same transaction, on every backend; the store refuses the same key with a
different fingerprint (:class:`~dormant.errors.IdempotencyMismatch`, 422
``idempotency_mismatch``) and writes nothing.
"""

from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel

#: The scheme of every fingerprint (``sha256:`` + 64 hex digits).
SCHEME = "sha256:"


def fingerprint(document: object) -> str:
    """The fingerprint of a JSON-able ``document``."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return SCHEME + hashlib.sha256(canonical.encode()).hexdigest()


def body_fingerprint(body: BaseModel) -> str:
    """The fingerprint of a validated request body."""
    return fingerprint(body.model_dump(mode="json"))
