# ruff: noqa: RUF001 - Chinese text has full-width punctuation
"""dormant against a real llama.cpp server serving SmolLM2-135M-Instruct on this CPU.

The checks use the server's own figures: its ``/props`` context size and the
``usage.prompt_tokens`` of every reply (kept on each assistant message). Figures are
printed and written to ``bench-out/realmodel/figures.json``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import openai

from dormant import Agent, Runtime, tool
from dormant.config import Settings
from dormant.models.base import ModelReply, ModelRequest
from dormant.models.openai import OpenAIChatModel
from dormant.models.scripted import ScriptedModel
from dormant.records import Message, ToolCall
from dormant.tokens import ServerEncoder, TokenCounter
from tests.helpers import all_messages
from tests.realmodel.conftest import CONTEXT, LlamaServer, free_port

FIGURES = Path(__file__).resolve().parents[2] / "bench-out" / "realmodel" / "figures.json"
MAX_OUTPUT = 48


def record(name: str, value: Any) -> None:
    """Print a figure and keep it in :data:`FIGURES`."""
    FIGURES.parent.mkdir(parents=True, exist_ok=True)
    figures = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
    figures[name] = value
    FIGURES.write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
    print(f"figure {name} = {value}")


def settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "poll_s": 0.02,
        "retry_base_s": 0.1,
        "retry_max_s": 2.0,
        "model_check_s": 0.1,
        "worker_id": "realmodel",
        "rss_governor": False,
    }
    values.update(overrides)
    return Settings.build(**values)


def smol(server: LlamaServer, **options: Any) -> OpenAIChatModel:
    values: dict[str, Any] = {
        "model": "smollm2",
        "base_url": server.base_url,
        "context_window": CONTEXT,
        "max_output_tokens": MAX_OUTPUT,
        "temperature": 0.0,
        "max_retries": 1,
        "backoff": 0.1,
    }
    values.update(options)
    return OpenAIChatModel(**values)


def over(messages: list[Message], context: int) -> list[int]:
    """The prompts the server counted over what ``context`` leaves for the reply."""
    return [m.usage.prompt for m in messages if m.usage is not None and m.usage.prompt + MAX_OUTPUT > context]


async def test_the_server_says_its_context_and_that_its_template_has_no_tools(llama: LlamaServer) -> None:
    model = smol(llama, context_window=128_000)
    try:
        info = await model.describe()
    finally:
        await model.aclose()
    assert (info.context, info.supports_tools) == (
        llama.props()["default_generation_settings"]["n_ctx"],
        False,
    )
    warnings = info.warnings(window=128_000, tools=2, agent="a")
    assert len(warnings) == 2


async def test_a_multi_turn_chat(llama: LlamaServer, tmp_path: Path) -> None:
    model = smol(llama)
    agent = Agent(name="a", model=model, system_prompt="You are a helpful assistant. Answer briefly.")
    try:
        async with Runtime(f"sqlite:///{tmp_path}/chat.db", [agent], settings=settings()) as rt:
            for n, text in enumerate(["Hello! What is the capital of France?", "And of Italy?", "Thanks!"]):
                await rt.send("chat", text, key=f"k{n}")
                await rt.run_until_idle(timeout=120)
            history = await all_messages(rt.store, "chat")
            thread = await rt.thread("chat")
    finally:
        await model.aclose()
    replies = [m for m in history if m.role == "assistant"]
    assert [m.role for m in history] == ["user", "assistant"] * 3
    assert all(m.content.strip() for m in replies)
    prompts = [m.usage.prompt for m in replies if m.usage is not None]
    assert len(prompts) == 3 and prompts[0] < prompts[1] < prompts[2], "each turn reads the ones before"
    assert thread.usage_prompt == sum(prompts) and thread.failures == 0


RUSSIAN = (
    "Здравствуйте! Заказ номер {n} пришёл повреждённым: коробка смята, крышка треснула, "
    "инструкция намокла. Я уже дважды писал в поддержку, но ответа нет. Прошу оформить возврат "
    "денег на карту или прислать замену до пятницы, потому что это подарок на день рождения."
)
CHINESE = (
    "您好！我的订单{n}号收到时已经损坏：盒子被压扁，盖子裂开，说明书也湿了。我已经给客服写过两次信，"
    "但一直没有回复。请尽快为我办理退款到银行卡，或者在周五之前寄来新的商品，因为这是生日礼物。"
    "另外请告诉我退货的运费由谁承担，以及需要提供哪些照片作为证明。"
)


async def converse(rt: Runtime, thread: str, template: str, turns: int) -> list[Message]:
    for n in range(turns):
        await rt.send(thread, template.format(n=1000 + n), key=f"k{n}")
        await rt.run_until_idle(timeout=300)
    return await all_messages(rt.store, thread)


async def test_russian_and_chinese_threads_stay_within_the_server_s_context(
    llama: LlamaServer, tmp_path: Path
) -> None:
    context = llama.props()["default_generation_settings"]["n_ctx"]
    assert context == CONTEXT
    model = smol(llama)
    agent = Agent(name="a", model=model, system_prompt="You are a support agent. Answer briefly.")
    started = time.monotonic()
    try:
        async with Runtime(f"sqlite:///{tmp_path}/lang.db", [agent], settings=settings()) as rt:
            russian = await converse(rt, "ru", RUSSIAN, 10)
            chinese = await converse(rt, "zh", CHINESE, 10)
            stats = rt.stats
            states = [await rt.state("ru"), await rt.state("zh")]
            threads = [await rt.thread("ru"), await rt.thread("zh")]
    finally:
        await model.aclose()
    requests = [m for m in russian + chinese if m.role == "assistant" and m.usage is not None]
    largest = max(m.usage.prompt for m in requests if m.usage is not None)
    record("languages_requests", len(requests))
    record("languages_requests_over_context", len(over(russian + chinese, context)))
    record("languages_refused_by_server", stats.context_overflows)
    record("languages_largest_prompt_tokens", largest)
    record("languages_compactions", stats.compactions)
    record("languages_learned_ratio", [s.get("dormant.token_ratio") for s in states])
    record("languages_seconds", round(time.monotonic() - started, 1))
    assert all(t.status == "active" and t.failures == 0 for t in threads), threads
    assert over(russian + chinese, context) == [], "a prompt went over the server's context"
    assert stats.context_overflows == 0, "the server refused a prompt as over its context"
    assert stats.compactions >= 2, "each thread outgrew its window and was compacted"
    assert all(s["dormant.token_ratio"]["ratio"] > 1.5 for s in states), states
    assert largest > context // 3, "the threads did fill the window"


ORDERS = {"1000": "delivered", "2000": "delivered", "4521": "shipped on Monday"}


@tool
def order_status(order_id: str) -> str:
    """The delivery status of an order."""
    return f"order {order_id}: {ORDERS.get(order_id, 'unknown')}"


class ToolFirst(OpenAIChatModel):
    """After a tool result, asks the server for text (``tool_choice: none``), so a small
    model does not call the tool again and again."""

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        body = super().request_body(request)
        if request.tools and request.messages[-1].role == "tool":
            body["tool_choice"] = "none"
        return body


def example_turns(request: ModelRequest) -> ModelReply:
    """The thread's earlier turns, written by a scripted model: examples a 135M model follows."""
    last = request.messages[-1]
    if last.role == "tool":
        return ModelReply(text=f"{last.content.split(':')[0].capitalize()} was delivered.")
    order = last.content.rstrip("?").split()[-1]
    call = ToolCall(id=f"call_{order}", name="order_status", arguments=json.dumps({"order_id": order}))
    return ModelReply(text="", tool_calls=(call,))


async def test_a_tool_round_trip_with_a_tool_capable_template(
    llama_tools: LlamaServer, tmp_path: Path
) -> None:
    assert llama_tools.props()["chat_template_caps"]["supports_tools"] is True
    url = f"sqlite:///{tmp_path}/tools.db"
    system = "Use the tools to answer."
    scripted = Agent(
        name="a",
        model=ScriptedModel(example_turns),
        tools=[order_status],
        system_prompt=system,
        builtins=False,
    )
    async with Runtime(url, [scripted], settings=settings()) as rt:
        for order in ("1000", "2000"):
            await rt.send("t", f"What is the status of order {order}?", key=f"k{order}")
            await rt.run_until_idle(timeout=60)
        before = len(await all_messages(rt.store, "t"))
    model = ToolFirst(
        model="smollm2",
        base_url=llama_tools.base_url,
        context_window=CONTEXT,
        max_output_tokens=96,
        temperature=0.0,
        max_retries=1,
    )
    agent = Agent(name="a", model=model, tools=[order_status], system_prompt=system, builtins=False)
    try:
        info = await model.describe()
        assert info.warnings(window=CONTEXT, tools=1, agent="a") == []
        async with Runtime(url, [agent], settings=settings()) as rt:
            await rt.send("t", "What is the status of order 4521?", key="k4521")
            await rt.run_until_idle(timeout=300)
            history = (await all_messages(rt.store, "t"))[before:]
    finally:
        await model.aclose()
    calls = [c for m in history if m.role == "assistant" for c in m.tool_calls]
    results = [m for m in history if m.role == "tool"]
    assert calls and calls[0].name == "order_status", [
        (m.role, m.content[:100], m.tool_calls) for m in history
    ]
    assert json.loads(calls[0].arguments) == {"order_id": "4521"}
    assert results and results[0].content == "order 4521: shipped on Monday"
    assert history[-1].role == "assistant" and history[-1].content.strip() and not history[-1].tool_calls
    record("tool_round_trip_messages", [m.role for m in history])


async def test_counts_from_the_server_s_tokenize_endpoint(llama: LlamaServer) -> None:
    encoder = ServerEncoder(llama.base_url)
    text = RUSSIAN.format(n=7)
    assert await encoder.fill([text]) == 1
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"http://127.0.0.1:{llama.port}/tokenize", json={"content": text, "add_special": False}
        )
    assert encoder.count(text) == len(response.json()["tokens"])
    assert encoder.count(text) > 1.5 * TokenCounter("o200k_base").text(text), "Russian costs SmolLM more"


async def test_kill_and_restart_the_server_every_waiting_thread_answers_promptly(
    own_llama: LlamaServer, tmp_path: Path
) -> None:
    model = smol(own_llama, max_output_tokens=16)
    agent = Agent(name="a", model=model, system_prompt="Answer in one short sentence.")
    threads = [f"w{n}" for n in range(5)]
    try:
        async with Runtime(f"sqlite:///{tmp_path}/recovery.db", [agent], settings=settings()) as rt:
            running = asyncio.create_task(rt.run())
            try:
                own_llama.kill()
                for name in threads:
                    await rt.send(name, f"Say hello to {name}.", key="k")
                deadline = time.monotonic() + 60
                while (await rt.status()).threads_waiting < len(threads):
                    assert time.monotonic() < deadline, "the threads did not start waiting"
                    await asyncio.sleep(0.05)
                await asyncio.sleep(1.0)  # a while down, as in a real restart
                own_llama.start()
                healthy = await asyncio.to_thread(own_llama.wait_healthy)

                async def answered() -> int:
                    return sum([len(await all_messages(rt.store, n)) == 2 for n in threads])

                while await answered() < len(threads):
                    assert time.monotonic() - healthy < 60, "not every thread was answered"
                    await asyncio.sleep(0.02)
                recovery = time.monotonic() - healthy
            finally:
                rt.stop()
                await running
    finally:
        await model.aclose()
    record("recovery_seconds_5_threads", round(recovery, 2))
    assert recovery < 5.0, f"recovery took {recovery:.2f}s from the server's first healthy answer"


def test_serve_with_the_official_openai_client(llama: LlamaServer, tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DORMANT_") and k != "OPENAI_API_KEY"}
    env.update({"DORMANT_CONTEXT_WINDOW": str(CONTEXT), "DORMANT_MAX_OUTPUT": str(MAX_OUTPUT)})
    argv = [sys.executable, "-m", "dormant.cli", "serve", "--store", "memory://", "--port", str(port)]
    argv += ["--model", "smollm2", "--base-url", llama.base_url, "--bootstrap-tenant", "acme"]
    proc = subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        key = proc.stdout.readline().strip()
        lines: list[str] = []
        while True:
            line = proc.stderr.readline()
            assert line, f"serve ended: {''.join(lines)}"
            lines.append(line)
            if "dormant serving" in line:
                break
        started = "".join(lines)
        assert "no tool support" in started, "the built-in agent's tools cannot work here: said at start"
        assert "declares a context window" not in started
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0, timeout=300
        )
        chat = client.chat.completions.create(
            model="assistant", user="s1", messages=[{"role": "user", "content": "Hi! Who are you?"}]
        )
        assert chat.choices[0].message.content and chat.usage is not None
        assert chat.usage.prompt_tokens > (chat.usage.model_extra or {})["added_tokens"], "the whole prompt"
        first = client.responses.create(model="assistant", input="Name a colour.")
        assert first.output_text
        with client.responses.stream(
            model="assistant", input="Name another one.", previous_response_id=first.id
        ) as stream:
            kinds = [event.type for event in stream]
            final = stream.get_final_response()
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
        assert final.output_text and final.id != first.id
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        record("serve_stop_seconds", round(time.monotonic() - sent, 2))
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
