"""What an OpenAI-compatible model server says about itself: its context size, whether its
chat template can use tools, its own token counts.

Read once at start (:func:`probe`) and when asked (``dormant status``), never per request:

* llama.cpp: ``GET {root}/props`` gives ``default_generation_settings.n_ctx`` (the
  context size of one slot) and ``chat_template_caps.supports_tools``; ``POST
  {root}/tokenize`` counts a text in the model's own tokens;
* vLLM: ``GET {base_url}/models`` gives each model's ``max_model_len``; ``POST
  {root}/tokenize`` counts too.

``root`` is the base URL without its trailing ``/v1``. Every call is bounded (a few
seconds, a capped body); a server that answers none of them is simply not described
(:attr:`ServerInfo.known` is false): probing never fails a start.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import httpx
import msgspec

from ..tokens import root_of, server_count

__all__ = ["MAX_BODY", "ServerInfo", "probe", "root_of", "tokenize"]

tokenize = server_count  # POST {root}/tokenize: the server's count of a text

log = logging.getLogger("dormant.models")

#: Most bytes of a ``/props`` or ``/models`` body read (llama.cpp's props hold the chat
#: template, a few KB; beyond this the body is not parsed).
MAX_BODY = 1024 * 1024
#: Seconds one probe request may take.
PROBE_TIMEOUT_S = 3.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerInfo:
    """What a model server said about itself (None: it did not say)."""

    endpoint: str
    #: tokens of context one request may use, as the server counts them
    context: int | None = None
    #: whether the chat template renders tool schemas (llama.cpp); None: not said
    supports_tools: bool | None = None
    #: where the context size came from (``"llama.cpp /props"``, ``"vLLM /v1/models"``)
    source: str = ""

    @property
    def known(self) -> bool:
        """Whether the server said anything."""
        return self.context is not None or self.supports_tools is not None

    def warnings(self, *, window: int, tools: int, agent: str) -> list[str]:
        """What an agent declaring ``window`` tokens with ``tools`` tool schemas should be
        told about this server (empty when nothing is wrong or nothing is known)."""
        found: list[str] = []
        if self.context is not None and window > self.context:
            found.append(
                f"agent {agent!r} declares a context window of {window:,} tokens but {self.endpoint} "
                f"serves {self.context:,} ({self.source}): prompts may be refused; set "
                f"--context-window {self.context} (DORMANT_CONTEXT_WINDOW)"
            )
        if self.supports_tools is False and tools:
            found.append(
                f"agent {agent!r} has {tools} tool(s) but the chat template of {self.endpoint} has no "
                "tool support (llama.cpp /props: supports_tools false): the server leaves the tool "
                "schemas out of the prompt and the model will never call a tool; serve a "
                "tool-capable template (llama-server --jinja --chat-template-file ...)"
            )
        return found


async def _get_json(client: httpx.AsyncClient, url: str, headers: dict[str, str]) -> Any:
    try:
        async with client.stream("GET", url, headers=headers, timeout=PROBE_TIMEOUT_S) as response:
            if response.status_code != 200:
                return None
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_BODY:
                    return None
    except (httpx.HTTPError, httpx.InvalidURL, OSError):
        return None
    try:
        return msgspec.json.decode(bytes(body))
    except msgspec.DecodeError:
        return None


def _positive(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


async def probe(
    base_url: str,
    model: str,
    *,
    endpoint: str | None = None,
    api_key: str | None = None,
    client: httpx.AsyncClient | None = None,
) -> ServerInfo:
    """Ask the server at ``base_url`` its context size and tool support (see the module
    docstring). Never raises for what the server does; each request is bounded by
    :data:`PROBE_TIMEOUT_S` seconds and :data:`MAX_BODY` bytes."""
    shown = endpoint or base_url
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    own = client is None
    http = client or httpx.AsyncClient()
    try:
        props = await _get_json(http, f"{root_of(base_url)}/props", headers)
        if isinstance(props, dict):
            settings = props.get("default_generation_settings")
            context = _positive(settings.get("n_ctx")) if isinstance(settings, dict) else None
            caps = props.get("chat_template_caps")
            tools = caps.get("supports_tools") if isinstance(caps, dict) else None
            if context is not None or isinstance(tools, bool):
                return ServerInfo(
                    endpoint=shown,
                    context=context,
                    supports_tools=tools if isinstance(tools, bool) else None,
                    source="llama.cpp /props",
                )
        listing = await _get_json(http, f"{base_url.rstrip('/')}/models", headers)
        data = listing.get("data") if isinstance(listing, dict) else None
        if isinstance(data, list):
            items = [item for item in data if isinstance(item, dict)]
            chosen = [item for item in items if item.get("id") == model] or items
            found = [n for item in chosen if (n := _positive(item.get("max_model_len"))) is not None]
            if found:
                return ServerInfo(endpoint=shown, context=min(found), source="vLLM /v1/models")
        return ServerInfo(endpoint=shown)
    finally:
        if own:
            await http.aclose()
