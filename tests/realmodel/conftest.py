"""The real-model suite: llama.cpp's ``llama-server`` serving SmolLM2-135M-Instruct.

Every test here is marked ``realmodel``. The server and the model come from the cache
that :mod:`tests.realmodel.build_server` fills (``~/.cache/dormant/llama-cpp-<version>``).
When it is missing: under ``CI=true`` (or ``DORMANT_REALMODEL=1``) it is built here, and
a failed build fails the suite; otherwise the suite is skipped with the command to build
it. Run it with ``make test PYTEST_ARGS="tests/realmodel -m realmodel"``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.realmodel.build_server import Artifacts, BuildError, cached, ensure_server

#: The context of the server the language tests run against (tokens, its own).
CONTEXT = 2048


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.realmodel)


def _required() -> bool:
    return os.environ.get("CI") == "true" or os.environ.get("DORMANT_REALMODEL") == "1"


@pytest.fixture(scope="session")
def artifacts() -> Artifacts:
    hit = cached()
    if hit is not None:
        return hit
    if not _required():
        pytest.skip(
            "llama-server is not built: run tests/realmodel/build_server.sh (~20 min on 2 cores), "
            "or set DORMANT_REALMODEL=1 to build it now"
        )
    try:
        return ensure_server()
    except BuildError as exc:
        pytest.fail(f"cannot build llama-server for the real-model suite: {exc}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class LlamaServer:
    """One ``llama-server`` process on 127.0.0.1 (``--no-repack --threads 1``), restartable."""

    def __init__(
        self, art: Artifacts, log: Path, *, context: int = CONTEXT, template: str | None = None
    ) -> None:
        self.art = art
        self.port = free_port()
        self.context = context
        self.template = template
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def argv(self) -> list[str]:
        argv = [
            str(self.art.server),
            "-m",
            str(self.art.model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        argv += ["-c", str(self.context), "--no-repack", "--threads", "1", "--jinja", "--seed", "7"]
        if self.template is not None:
            argv += ["--chat-template-file", str(self.art.template(self.template))]
        return argv

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.argv(), stdout=out, stderr=subprocess.STDOUT)

    def healthy(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_healthy(self, timeout: float = 60.0) -> float:
        """Poll ``/health`` until it answers 200; the monotonic time it first did."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited ({self.proc.returncode}); see {self.log}")
            if self.healthy():
                return time.monotonic()
            time.sleep(0.02)
        raise TimeoutError(f"llama-server not healthy after {timeout}s; see {self.log}")

    def props(self) -> dict[str, Any]:
        body: dict[str, Any] = httpx.get(f"http://127.0.0.1:{self.port}/props", timeout=5).json()
        return body

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None


def _serve(art: Artifacts, tmp: Path, name: str, **options: Any) -> Iterator[LlamaServer]:
    server = LlamaServer(art, tmp / f"{name}.log", **options)
    server.start()
    try:
        server.wait_healthy()
        yield server
    finally:
        server.kill()


@pytest.fixture(scope="session")
def llama(artifacts: Artifacts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """SmolLM2 with its own chat template (no tool support) at a 2,048-token context."""
    yield from _serve(artifacts, tmp_path_factory.mktemp("llama"), "smol")


@pytest.fixture(scope="session")
def llama_tools(artifacts: Artifacts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """SmolLM2 behind a tool-capable chat template (Qwen2.5's, from the llama.cpp sources)."""
    yield from _serve(
        artifacts, tmp_path_factory.mktemp("llama-tools"), "tools", template="Qwen-Qwen2.5-7B-Instruct.jinja"
    )


@pytest.fixture
def own_llama(artifacts: Artifacts, tmp_path: Path) -> Iterator[LlamaServer]:
    """A server of the test's own, to kill and restart."""
    yield from _serve(artifacts, tmp_path, "own")
