"""``import dormant`` loads neither dormant's MCP server (only ``dormant serve`` and
``dormant mcp serve`` do) nor the MCP SDK (only a process with an MCP server attached
does: the SDK alone is ~25 MB of RSS and ~0.6 s of start-up)."""

from __future__ import annotations

import subprocess
import sys

SERVER = ("dormant.server.mcp", "dormant.server.calls")
SDK = ("mcp",)  # mcp, mcp.*, mcp_types


def _loaded(prefixes: tuple[str, ...]) -> str:
    code = (
        "import sys, dormant, dormant.cli.main; "
        f"print(sorted(m for m in sys.modules if m.startswith({prefixes!r})))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_import_dormant_does_not_load_the_mcp_server() -> None:
    assert _loaded(SERVER) == "[]"


def test_import_dormant_does_not_load_the_mcp_sdk() -> None:
    assert _loaded(SDK) == "[]"
