"""A bounded stdio transport for the ``mcp`` SDK's client session.

The SDK's own stdio transport buffers a line of any length and lets stderr through
to ours; a server that floods stdout or answers with a 50 MB line would grow the
worker without bound. This transport (an SDK ``Transport``: it yields the session's
read and write streams, the JSON-RPC session itself stays the SDK's) reads stdout in
pieces and ends the connection at the first line over ``max_message_bytes`` or the
first line that is not JSON-RPC, keeps the newest ``stderr_bytes`` of stderr and
logs each stderr line (cut to :data:`LOG_LINE`) with the server's name. Why the
connection ended is kept in :attr:`StdioTransport.ended`, for the error a call gets.

The process is started with the SDK's default environment (``PATH``, ``HOME``, ...)
plus the configured ``env``, which is never logged.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage

log = logging.getLogger("dormant.mcp")

#: Longest piece of one stderr line put in a log record.
LOG_LINE = 512
#: How long a server may take to exit once its stdin is closed, before it is killed.
EXIT_GRACE_S = 2.0
_READ = 64 * 1024


class StderrTail:
    """The newest bytes of a server's stderr: at most ``limit`` bytes, in lines."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lines: deque[bytes] = deque()
        self._bytes = 0

    def add(self, line: bytes) -> None:
        """Keep ``line`` (cut to ``limit``), dropping the oldest lines past the bound."""
        line = line[-self.limit :]
        self._lines.append(line)
        self._bytes += len(line)
        while self._bytes > self.limit and self._lines:
            self._bytes -= len(self._lines.popleft())

    @property
    def size(self) -> int:
        """Bytes kept now."""
        return self._bytes

    def text(self, chars: int = 400) -> str:
        """The last ``chars`` characters kept, one line."""
        joined = b" | ".join(line.strip() for line in self._lines if line.strip())
        return joined.decode("utf-8", errors="replace")[-chars:]


class StdioTransport:
    """Start ``command args`` and carry JSON-RPC over its stdin and stdout, bounded."""

    def __init__(
        self,
        server: str,
        command: str,
        args: tuple[str, ...],
        env: dict[str, str],
        cwd: str | None,
        *,
        max_message_bytes: int,
        stderr: StderrTail,
    ) -> None:
        self.server = server
        self.command = command
        self.args = args
        self.env = env
        self.cwd = cwd
        self.max_message_bytes = max_message_bytes
        self.stderr = stderr
        #: why the connection ended (None while it is up, or after a clean close)
        self.ended: str | None = None
        self.pid: int | None = None
        self.returncode: int | None = None
        self._stopping = False
        self._process: anyio.abc.Process | None = None

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[tuple[Any, Any]]:
        """The (read, write) streams of one connection; the process ends with the block."""
        process = await anyio.open_process(
            [self.command, *self.args],
            env={**get_default_environment(), **self.env},
            cwd=self.cwd,
            start_new_session=True,  # its own process group: a signal to ours is not its
        )
        self.pid = process.pid
        self._process = process
        to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](16)
        write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](16)

        async def stdout() -> None:
            assert process.stdout is not None
            buffer = bytearray()
            try:
                async with to_session:
                    async for chunk in process.stdout:
                        buffer += chunk
                        while (cut := buffer.find(b"\n")) >= 0:
                            line = bytes(buffer[:cut])
                            del buffer[: cut + 1]
                            if line.strip() and not await self._deliver(line, to_session):
                                return
                        if len(buffer) > self.max_message_bytes:
                            self._end(f"sent a message over {self.max_message_bytes} bytes (the limit)")
                            return
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                pass
            finally:
                if self.ended is None:
                    self._end("closed its stdout")
                with suppress(ProcessLookupError):
                    process.kill()  # ends the connection for the session too

        async def stderr() -> None:
            assert process.stderr is not None
            pending = bytearray()
            with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                async for chunk in process.stderr:
                    pending += chunk
                    while (cut := pending.find(b"\n")) >= 0:
                        self._stderr_line(bytes(pending[:cut]))
                        del pending[: cut + 1]
                    if len(pending) > self.stderr.limit:
                        self._stderr_line(bytes(pending))
                        pending.clear()
            if pending:
                self._stderr_line(bytes(pending))

        async def stdin() -> None:
            assert process.stdin is not None
            with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                async with from_session:
                    async for message in from_session:
                        data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                        await process.stdin.send(data.encode() + b"\n")

        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(stdout)
                tasks.start_soon(stderr)
                tasks.start_soon(stdin)
                try:
                    yield read_stream, write_stream
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._stop(process)
                    tasks.cancel_scope.cancel()
        finally:
            self.returncode = process.returncode

    async def _deliver(self, line: bytes, to_session: Any) -> bool:
        if len(line) > self.max_message_bytes:
            self._end(f"sent a message over {self.max_message_bytes} bytes (the limit)")
            return False
        try:
            message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except ValueError:
            self._end(f"sent a line that is not JSON-RPC: {line[:80].decode('utf-8', errors='replace')!r}")
            return False
        await to_session.send(SessionMessage(message))
        return True

    def abort(self, reason: str) -> None:
        """End the connection now (the server hangs): kill the process, keep ``reason``."""
        self._end(reason)
        if self._process is not None and self._process.returncode is None:
            with suppress(ProcessLookupError):
                self._process.kill()

    def _end(self, reason: str) -> None:
        if self.ended is None and not self._stopping:
            self.ended = reason
            log.warning("mcp_server_connection_ended", extra={"server": self.server, "reason": reason})

    def _stderr_line(self, line: bytes) -> None:
        self.stderr.add(line)
        text = line.decode("utf-8", errors="replace").rstrip()
        if text:
            log.info("mcp_server_stderr", extra={"server": self.server, "line": text[:LOG_LINE]})

    async def _stop(self, process: anyio.abc.Process) -> None:
        self._stopping = True
        if process.stdin is not None:
            with suppress(Exception):
                await process.stdin.aclose()
        with anyio.move_on_after(EXIT_GRACE_S):
            await process.wait()
        if process.returncode is None:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, 9)
            with suppress(ProcessLookupError):
                process.kill()
            with anyio.move_on_after(EXIT_GRACE_S):
                await process.wait()
        self.returncode = process.returncode
