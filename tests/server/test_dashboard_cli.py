"""``dormant ui``: the dashboard alone on loopback, over a store another process works on."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx


def test_dormant_ui_serves_only_the_dashboard_and_prints_a_token(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/ui.db"
    env = {**os.environ, "DORMANT_ADMIN_TOKEN": ""}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dormant.cli", "ui", "--store", store, "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stderr is not None
        lines: list[str] = []
        deadline = time.monotonic() + 30
        url = token = None
        while (url is None or token is None) and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            if m := re.search(r"operator token \(not shown again\): (\S+)", line):
                token = m.group(1)
            if m := re.search(r"dashboard at (http://127\.0\.0\.1:\d+)/ui", line):
                url = m.group(1)
        assert url and token, lines
        with httpx.Client(base_url=url, timeout=10) as c:
            assert c.get("/v1/status").status_code == 404  # the API is not served here
            assert c.post("/ui/login", data={"token": "wrong"}).status_code == 401
            assert c.post("/ui/login", data={"token": token}).status_code == 303
            page = c.get("/ui/overview")
            assert page.status_code == 200 and "every tenant" in page.text
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
