"""What a process running agents imports: nothing it does not use (each is resident RAM)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import asyncio, sys
from pathlib import Path
from dormant.bench.scale import run_scale

asyncio.run(run_scale("sqlite", agents=4, turns=2, wave=4, out=Path(sys.argv[1])))
HEAVY = {"numpy", "onnxruntime", "fastapi", "sqlite_vec", "httpx", "click", "rich", "pygments"}
heavy = sorted({m.split(".")[0] for m in sys.modules} & HEAVY)
print(",".join(heavy))
"""


def test_running_agents_on_sqlite_imports_no_numpy_nor_server_nor_httpx(tmp_path: Path) -> None:
    # the store loads sqlite-vec's extension into its connections without importing the
    # package (whose __init__ imports numpy, ~11 MB); the server and the embedder are lazy;
    # httpx (whose __init__ pulls in click, rich and pygments, ~8 MiB) is imported only
    # where an HTTP call is made
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "out")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1:] in ([""], []), done.stdout
