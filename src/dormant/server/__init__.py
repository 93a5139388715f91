"""``dormant serve``: the HTTP server — native REST v1, resumable event streams, tenants,
OpenAI-compatible Chat Completions and Responses — hosting one :class:`~dormant.runtime.Runtime`.

Modules: :mod:`.app` (the app and its lifespan), :mod:`.routes` (REST v1),
:mod:`.streams` (SSE), :mod:`.hub` (wake-ups and live text), :mod:`.turns` (one
exchange for the OpenAI endpoints), :mod:`.openai_chat`, :mod:`.openai_responses`,
:mod:`.tenants` (the :class:`TenantDirectory` and API keys), :mod:`.scope` (tenant
scope of thread ids: an interim prefix until the store core scopes by tenant),
:mod:`.limits` (body size before parsing), :mod:`.problems` (errors as JSON).
"""

from .app import ServerConfig, create_app
from .tenants import SQLiteTenantDirectory, TenantDirectory

__all__ = ["SQLiteTenantDirectory", "ServerConfig", "TenantDirectory", "create_app"]
