"""``dormant serve``: the HTTP server — native REST v1, resumable event streams, tenants,
OpenAI-compatible Chat Completions and Responses — hosting one :class:`~dormant.runtime.Runtime`.

Modules: :mod:`.app` (the app and its lifespan), :mod:`.routes` (REST v1),
:mod:`.streams` (SSE), :mod:`.hub` (wake-ups and live text), :mod:`.turns` (one exchange
for the OpenAI endpoints), :mod:`.openai_chat`, :mod:`.openai_responses`, :mod:`.state`
(the knobs and state every route shares), :mod:`.limits` (body size before parsing),
:mod:`.uploads`, :mod:`.multipart` and :mod:`.upload_routes` (images and files as JSON
parts or streamed ``multipart/form-data``), :mod:`.validation` (the one text check),
:mod:`.problems` (errors as JSON), :mod:`.access` (access log, request ids, HTTP
metrics), :mod:`.guard` (header caps and read timeouts of a connection), :mod:`.tokens`
and :mod:`.stream_auth` (event-stream tokens), :mod:`.cors` (browser origins),
:mod:`.ui` (the dashboard at ``/ui``). ``dormant tenants`` is
:mod:`dormant.cli.tenants`.

May import: the runtime, ops (the exporter, workers), the store protocol, long-term
memory's handle and the root's vocabulary; never the CLI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import ServerConfig, create_app

__all__ = ["ServerConfig", "create_app"]


def __getattr__(name: str) -> Any:
    """Import the app (FastAPI, uvicorn) only when it is asked for, so commands that
    never serve — ``dormant tenants``, ``dormant run``, ``dormant --help`` — do not pay
    for loading the web stack."""
    if name in __all__:
        from . import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
