"""The OpenAI error shape on the OpenAI-compatible routes.

OpenAI's clients read ``{"error": {"message", "type", "param", "code"}}`` and pick the
exception class from the status (``openai.NotFoundError`` for 404, ...). The routes
under :data:`OPENAI_PREFIXES` answer every error in that shape; ``code`` is the same
stable code as on the native routes (:mod:`dormant.errors`), so one table still maps
every error, and ``type`` is OpenAI's family for the status.
"""

from __future__ import annotations

from typing import Any

#: Paths whose errors use the OpenAI shape.
OPENAI_PREFIXES = ("/v1/chat/completions", "/v1/responses", "/v1/models")


def is_openai(path: str) -> bool:
    """Whether ``path`` is one of the OpenAI-compatible routes."""
    return any(path == p or path.startswith(p + "/") for p in OPENAI_PREFIXES)


def error_type(status: int) -> str:
    """OpenAI's error ``type`` for an HTTP status."""
    if status == 401:
        return "authentication_error"
    if status == 403:
        return "permission_error"
    if status == 429:
        return "rate_limit_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def shape(code: str, message: str, status: int, param: str | None = None) -> dict[str, Any]:
    """The OpenAI error body."""
    return {"error": {"message": message, "type": error_type(status), "param": param, "code": code}}
