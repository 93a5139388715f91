"""The system Chromium the dashboard's browser tests drive (Playwright cannot download its
own browsers here): found on PATH, installed with apt-get as root under ``CI=true`` when
missing, else the tests skip and say why."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def chromium() -> str:
    """The path of a Chromium binary, or a skip (outside CI) / failure (under CI) naming why."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and os.environ.get("CI") == "true" and hasattr(os, "geteuid") and os.geteuid() == 0:
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "chromium"], check=False, capture_output=True, timeout=600
        )
        found = shutil.which("chromium")
    if found is None:
        reason = "no chromium on PATH (apt-get install -y chromium as root)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return found
