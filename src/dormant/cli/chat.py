"""``dormant send`` and ``dormant chat``: admit text to a thread, or talk to it line by line
(registered by :mod:`dormant.cli.main`)."""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from ..config import DEFAULT_STORE
from ..errors import DormantError, NotFound
from ..parts import File
from ..records import Priority
from ..runtime import Runtime
from ..urls import redact
from .agents import (
    AgentOpt,
    AppOpt,
    BaseUrlOpt,
    ConcurrencyOpt,
    ContextWindowOpt,
    MaxOutputOpt,
    ModelKnobs,
    ModelOpt,
    ModelTimeoutOpt,
    StreamTimeoutOpt,
    SystemOpt,
    TokenizerOpt,
    agents_for,
    close_models,
    server_notices,
)
from .apps import DEFAULT_BASE_URL, SCRIPTED
from .base import (
    MaxCharsOpt,
    StoreOpt,
    announce_if_new,
    clip,
    err,
    fail,
    out,
    run_async,
    settings_for,
)
from .retry import BuiltinsOpt


def send(
    thread: Annotated[str, typer.Argument(help="Thread id (created if new).")],
    text: Annotated[str, typer.Argument(help="User text to admit.")],
    store: StoreOpt = DEFAULT_STORE,
    key: Annotated[
        str | None,
        typer.Option(
            "--key", envvar="DORMANT_KEY", help="Dedup key: the same (thread, key) is admitted once."
        ),
    ] = None,
    agent: AgentOpt = None,
    priority: Annotated[
        int,
        typer.Option(
            "--priority", envvar="DORMANT_PRIORITY", min=0, max=2, help="0 urgent, 1 normal, 2 bulk."
        ),
    ] = 1,
    app_spec: AppOpt = None,
    model: ModelOpt = SCRIPTED,
    base_url: BaseUrlOpt = DEFAULT_BASE_URL,
    system: SystemOpt = None,
    identity: Annotated[
        list[str] | None,
        typer.Option(
            "--identity",
            envvar="DORMANT_IDENTITY",
            help="An identity part of the sender, NAME=VALUE (repeat: --identity phone=+15550100 "
            "--identity device=ios-1): the thread's subject, whose memory its agent uses.",
        ),
    ] = None,
    attach: Annotated[
        list[Path] | None,
        typer.Option(
            "--attach",
            envvar="DORMANT_ATTACH",
            help="An image or a file sent with the text (repeat: --attach photo.jpg --attach "
            "invoice.pdf); its type is sniffed from its bytes, images and PDFs are checked.",
        ),
    ] = None,
) -> None:
    """Admit user text (and attached images and files) to a thread durably (it runs on
    the next `dormant run`)."""
    parts = identity_parts(identity or [])
    files = [File(path) for path in attach or []]

    async def go() -> None:
        settings = settings_for(store)
        agents = agents_for(app_spec, model, base_url, system)
        rt = Runtime(settings.store, agents, settings=settings)
        await announce_if_new(rt.store)
        async with rt:
            admission = await rt.send(
                thread,
                text,
                key=key,
                agent=agent,
                priority=Priority(priority),
                identity=parts or None,
                parts=files,
            )
        if admission.duplicate:
            out.print(
                f"duplicate: input {admission.input_id} was already admitted to thread "
                f"{admission.thread_id} with key {admission.dedup_key!r}; nothing changed"
            )
        else:
            out.print(
                f"admitted input {admission.input_id} to thread {admission.thread_id} "
                f"(key {admission.dedup_key!r}, priority P{priority})"
            )

    run_async(go())


def identity_parts(items: list[str]) -> dict[str, str]:
    """``NAME=VALUE`` options as identity parts; exits with a usage error on a bad one."""
    parts: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            err.print(f"--identity takes NAME=VALUE, not {item!r}")
            raise typer.Exit(2)
        parts[name.strip()] = value.strip()
    return parts


def chat(
    thread: Annotated[str, typer.Argument(help="Thread id (created if new).")],
    store: StoreOpt = DEFAULT_STORE,
    agent: AgentOpt = None,
    concurrency: ConcurrencyOpt = None,
    app_spec: AppOpt = None,
    model: ModelOpt = SCRIPTED,
    base_url: BaseUrlOpt = DEFAULT_BASE_URL,
    system: SystemOpt = None,
    max_chars: MaxCharsOpt = 4000,
    context_window: ContextWindowOpt = None,
    max_output: MaxOutputOpt = None,
    builtins: BuiltinsOpt = False,
    model_timeout: ModelTimeoutOpt = None,
    stream_timeout: StreamTimeoutOpt = None,
    tokenizer: TokenizerOpt = None,
) -> None:
    """Talk to a thread: each line of stdin is sent, run until idle, and the replies printed.

    Works with piped stdin; ends on EOF or /quit. The built-in agent has no built-in
    tools unless --builtins is given.
    """
    interactive = sys.stdin.isatty()
    knobs = ModelKnobs(
        context_window=context_window,
        max_output=max_output,
        model_timeout=model_timeout,
        stream_timeout=stream_timeout,
        tokenizer=tokenizer,
    )
    try:
        settings = settings_for(store, concurrency=concurrency, **knobs.settings())
        agents = agents_for(app_spec, model, base_url, system, knobs, builtins=builtins)
        with asyncio.Runner() as runner:
            for notice in runner.run(server_notices(agents)):
                err.print(f"warning: {notice}", style="yellow")
            rt = Runtime(settings.store, agents, settings=settings)
            runner.run(announce_if_new(rt.store))
            runner.run(rt.open())
            try:
                cursor = runner.run(last_seq(rt, thread))
                if interactive:
                    where = redact(settings.store)
                    err.print(f"chatting with thread {thread} on {where}; /quit or Ctrl-D ends")
                while True:
                    line = read_line(interactive)
                    if line is None:
                        break
                    text = line.strip()
                    if not text:
                        continue
                    if text in ("/quit", "/exit"):
                        break
                    cursor = runner.run(chat_turn(rt, thread, text, agent, cursor, max_chars, interactive))
            finally:
                runner.run(rt.close())
                runner.run(close_models(agents))
    except DormantError as exc:
        fail(exc)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def read_line(interactive: bool) -> str | None:
    """One line of stdin (None at EOF); prompts when stdin is a terminal."""
    if interactive:
        try:
            return out.input("[bold cyan]you>[/] ")
        except EOFError:
            return None
    line = sys.stdin.readline()
    return line if line else None


async def last_seq(rt: Runtime, thread_id: str) -> int:
    """The thread's last message seq, 0 for a thread that does not exist yet."""
    try:
        return (await rt.thread(thread_id)).last_seq
    except NotFound:
        return 0


async def chat_turn(
    rt: Runtime,
    thread_id: str,
    text: str,
    agent: str | None,
    cursor: int,
    max_chars: int,
    interactive: bool = False,
) -> int:
    """Send ``text``, run until idle, print what the agent said after ``cursor``; the new cursor."""
    await rt.send(thread_id, text, key=f"chat:{uuid.uuid4().hex}", agent=agent)
    if interactive:
        with err.status("thinking…"):
            await rt.run_until_idle()
    else:
        await rt.run_until_idle()
    replies = 0
    while True:
        page = await rt.history(thread_id, cursor=str(cursor), limit=100)
        for message in page.items:
            cursor = message.seq
            if message.role == "assistant":
                replies += 1
                if message.content:
                    out.print(Text.assemble(("assistant: ", "bold green"), clip(message.content, max_chars)))
                for call in message.tool_calls:
                    out.print(f"  → {call.name}({clip(call.arguments, max_chars)})", style="yellow")
                if message.cut:  # the output cap stopped it (see --max-output)
                    err.print(Text("  [the reply was cut by the output cap]", "yellow"))
            elif message.role == "tool":
                result = clip(message.content, max_chars).replace("\n", " ⏎ ")
                out.print(Text(f"  ← {message.name or 'tool'}: {result}", style="magenta"))
        if page.next_cursor is None:
            break
    row = await rt.thread(thread_id)
    if row.status == "failed":
        err.print(
            Text(
                f"thread {thread_id} failed: {row.error}; fix the cause, then `dormant retry {thread_id}`",
                "red",
            )
        )
    elif row.wait_reason:  # the model endpoint is down: the thread waits, it has not failed
        err.print(Text(f"the model endpoint is down; the thread waits: {row.wait_reason}", "yellow"))
    elif replies == 0:
        note = f" (last error: {row.error})" if row.error else ""
        err.print(Text(f"no reply yet; the thread will be retried by `dormant run`{note}", "yellow"))
    return cursor
