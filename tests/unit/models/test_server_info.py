"""What a model server says about itself (llama.cpp /props, vLLM /v1/models), and the warnings."""

from __future__ import annotations

import json
from typing import Any

import httpx

from dormant.models.server import ServerInfo, probe, root_of


def client_for(routes: dict[str, tuple[int, Any]]) -> httpx.AsyncClient:
    def handle(request: httpx.Request) -> httpx.Response:
        status, body = routes.get(request.url.path, (404, {"error": "no"}))
        return httpx.Response(status, content=json.dumps(body).encode())

    return httpx.AsyncClient(transport=httpx.MockTransport(handle))


LLAMA_PROPS = {
    "default_generation_settings": {"n_ctx": 2048, "params": {}},
    "chat_template_caps": {"supports_tools": False, "supports_system_role": True},
    "total_slots": 1,
}


async def test_llama_cpp_props_give_the_context_and_tool_support() -> None:
    async with client_for({"/props": (200, LLAMA_PROPS)}) as client:
        info = await probe("http://127.0.0.1:8080/v1", "smol", client=client)
    assert info == ServerInfo(
        endpoint="http://127.0.0.1:8080/v1", context=2048, supports_tools=False, source="llama.cpp /props"
    )
    assert info.known


async def test_vllm_models_give_max_model_len_of_the_model() -> None:
    listing = {"data": [{"id": "other", "max_model_len": 4096}, {"id": "qwen", "max_model_len": 32768}]}
    async with client_for({"/v1/models": (200, listing)}) as client:
        info = await probe("http://h/v1", "qwen", client=client)
    assert (info.context, info.source, info.supports_tools) == (32768, "vLLM /v1/models", None)


async def test_a_server_that_says_nothing_is_not_described() -> None:
    async with client_for({"/v1/models": (200, {"data": [{"id": "gpt-4o"}]})}) as client:
        info = await probe("http://h/v1", "gpt-4o", client=client)
    assert not info.known and info.warnings(window=128_000, tools=3, agent="a") == []
    # an unreachable server is not described either, and probing does not raise
    info = await probe("http://127.0.0.1:9/v1", "m")
    assert not info.known


async def test_oversized_or_broken_bodies_are_ignored() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"x" * (2 * 1024 * 1024) if request.url.path == "/props" else b"{")

    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        assert not (await probe("http://h/v1", "m", client=client)).known


def test_warnings_name_the_fix() -> None:
    info = ServerInfo(endpoint="http://h/v1", context=2048, supports_tools=False, source="llama.cpp /props")
    too_big, no_tools = info.warnings(window=128_000, tools=4, agent="assistant")
    assert "128,000" in too_big and "2,048" in too_big and "--context-window 2048" in too_big
    assert "4 tool(s)" in no_tools and "supports_tools false" in no_tools
    assert info.warnings(window=2048, tools=0, agent="a") == []


def test_root_of() -> None:
    assert root_of("http://h:1/v1/") == "http://h:1"
    assert root_of("http://h:1/openai") == "http://h:1/openai"
