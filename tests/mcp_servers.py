"""The real MCP servers the tests run against, installed by the test set-up itself.

``mcp-server-time`` and ``mcp-server-git`` are dev dependencies (PyPI); the reference
server ``@modelcontextprotocol/server-everything`` is installed with npm into
``~/.cache/dormant/npm`` (outside the repository; ``DORMANT_NPM_CACHE`` moves it) on
first use, as ``.ci/run`` does. Without ``node`` and ``npm`` its tests skip with the
reason, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

import pytest

from dormant.tools.mcp import McpServer

EVERYTHING = "@modelcontextprotocol/server-everything"
EVERYTHING_VERSION = "2026.8.31"


def npm_cache() -> Path:
    """Where the npm server is installed."""
    return Path(os.environ.get("DORMANT_NPM_CACHE", Path.home() / ".cache" / "dormant" / "npm"))


def everything_js() -> Path:
    """The entry point of the installed ``server-everything`` (installed now if missing);
    skips (fails under CI=true) where node or npm is missing or the install fails."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        _unavailable("node and npm are needed for @modelcontextprotocol/server-everything")
    prefix = npm_cache()
    entry = prefix / "node_modules" / EVERYTHING / "dist" / "index.js"
    package = prefix / "node_modules" / EVERYTHING / "package.json"
    if not entry.exists() or f'"version": "{EVERYTHING_VERSION}"' not in package.read_text():
        prefix.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [
                npm,
                "install",
                "--no-audit",
                "--no-fund",
                "--prefix",
                str(prefix),
                f"{EVERYTHING}@{EVERYTHING_VERSION}",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0 or not entry.exists():
            _unavailable(f"npm install {EVERYTHING}@{EVERYTHING_VERSION} failed: {done.stderr[-500:]}")
    return entry


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: these tests must run)")
    pytest.skip(reason)


def time_server(**options: object) -> McpServer:
    """``mcp-server-time`` (PyPI), in UTC."""
    args = ("-m", "mcp_server_time", "--local-timezone", "UTC")
    return McpServer(name="time", command=sys.executable, args=args, **options)  # type: ignore[arg-type]


def git_server(repo: Path, **options: object) -> McpServer:
    """``mcp-server-git`` (PyPI) on ``repo``."""
    args = ("-m", "mcp_server_git", "--repository", str(repo))
    return McpServer(name="git", command=sys.executable, args=args, **options)  # type: ignore[arg-type]


def everything_server(**options: object) -> McpServer:
    """``@modelcontextprotocol/server-everything`` over stdio, run by node."""
    node = shutil.which("node") or "node"
    return McpServer(name="everything", command=node, args=(str(everything_js()), "stdio"), **options)  # type: ignore[arg-type]


def faulty_server(state: Path | None = None, name: str = "faulty", **options: object) -> McpServer:
    """The suite's own faulty server (:mod:`tests.integration.mcp_faulty`)."""
    args = ("-m", "tests.integration.mcp_faulty", *([str(state)] if state else []))
    root = str(Path(__file__).resolve().parent.parent)
    return McpServer(name=name, command=sys.executable, args=args, cwd=root, **options)  # type: ignore[arg-type]


def make_repo(path: Path) -> Path:
    """A git repository with one commit and one untracked file."""
    path.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    (path / "README.md").write_text("hello\n")
    for command in (
        ["init", "-q", "-b", "main"],
        ["add", "README.md"],
        ["commit", "-q", "-m", "first commit"],
    ):
        subprocess.run(["git", *command], cwd=path, check=True, env=env)
    (path / "notes.txt").write_text("untracked\n")
    return path


def media_server(**options: object) -> McpServer:
    """The suite's own SDK server whose tools answer with images and files
    (:mod:`tests.integration.mcp_media`)."""
    root = str(Path(__file__).resolve().parent.parent)
    args = ("-m", "tests.integration.mcp_media")
    return McpServer(name="media", command=sys.executable, args=args, cwd=root, **options)  # type: ignore[arg-type]
