"""CORS for browser clients of ``dormant serve``: off unless origins are named.

``--cors-origin`` (repeatable; ``DORMANT_CORS_ORIGIN``, space-separated) names the
origins whose pages may call the API: each ``http://`` or ``https://`` host with an
optional port and nothing else (no path, no trailing slash), or ``*`` for any origin.
Callers send their API key in ``Authorization`` (no cookies), so credentials mode is
never allowed. With no origin named, no CORS header is ever sent and a browser keeps
other sites' pages out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

from ..errors import UsageError

#: An origin as a browser sends it: scheme, host, optional port.
ORIGIN_PATTERN = r"^https?://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]{1,253})(:[0-9]{1,5})?$"
_ORIGIN = re.compile(ORIGIN_PATTERN)
#: Origins one server may name at most.
MAX_ORIGINS = 64
#: Request headers a page may send.
ALLOW_HEADERS = ("Authorization", "Content-Type", "Idempotency-Key", "Last-Event-ID", "X-Request-Id")
#: Response headers a page may read.
EXPOSE_HEADERS = ("X-Request-Id", "Retry-After")
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def cors_origins(values: Iterable[str]) -> tuple[str, ...]:
    """The origins, checked (UsageError naming the first bad one), without duplicates."""
    origins: list[str] = []
    for raw in values:
        for value in raw.split():
            if value != "*" and not _ORIGIN.match(value):
                raise UsageError(
                    f"bad CORS origin {value[:200]!r}: expected http(s)://host[:port] "
                    "(no path, no trailing slash) or *"
                )
            if value not in origins:
                origins.append(value)
    if len(origins) > MAX_ORIGINS:
        raise UsageError(f"at most {MAX_ORIGINS} CORS origins, not {len(origins)}")
    return tuple(origins)


def install_cors(app: FastAPI, origins: Iterable[str]) -> None:
    """Answer CORS requests of ``origins`` (checked); nothing at all when there are none."""
    allowed = cors_origins(origins)
    if not allowed:
        return
    app.add_middleware(
        CORSMiddleware,
        allow_origins=list(allowed),
        allow_methods=list(METHODS),
        allow_headers=list(ALLOW_HEADERS),
        expose_headers=list(EXPOSE_HEADERS),
        allow_credentials=False,
        max_age=600,
    )
