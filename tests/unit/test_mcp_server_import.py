"""``import dormant`` does not load dormant's MCP server (only ``dormant serve`` and
``dormant mcp serve`` do)."""

from __future__ import annotations

import subprocess
import sys

SERVER = ("dormant.server.mcp", "dormant.server.calls")


def test_import_dormant_does_not_load_the_mcp_server() -> None:
    code = (
        "import sys, dormant, dormant.cli.main; "
        f"print(sorted(m for m in sys.modules if m.startswith({SERVER!r})))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
