"""``dormant tenants`` and ``dormant serve`` in subprocesses: a key made on the command line
opens the API, and is refused once revoked."""

from __future__ import annotations

import signal
import subprocess
import time

import httpx

from dormant.bench.serve import free_port

from .runner import Cli, clean_env


def wait_ready(url: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(url + "/readyz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)


def test_tenants_keys_and_serve(cli: Cli) -> None:
    cli.ok("init")
    assert "tenant acme created" in cli.ok("tenants", "create", "acme")
    assert cli("tenants", "create", "acme").returncode == 2  # taken
    listing = cli.ok("tenants", "list")
    assert "acme" in listing
    key = cli.ok("tenants", "keys", "create", "acme").strip()
    assert key.startswith("dk_")
    key_id = key.split("_")[1]
    assert key_id in cli.ok("tenants", "keys", "list", "acme")

    port = free_port()
    proc = subprocess.Popen(
        cli.argv("serve", "--port", str(port)),
        cwd=cli.cwd,
        env=clean_env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, proc)
        assert httpx.get(url + "/ui/login").status_code == 200  # the dashboard is on by default
        headers = {"Authorization": f"Bearer {key}"}
        r = httpx.post(url + "/v1/threads/t/inputs", json={"content": "hi"}, headers=headers)
        assert r.status_code == 202
        assert "revoked" in cli.ok("tenants", "keys", "revoke", key_id)
        assert httpx.get(url + "/v1/threads", headers=headers).status_code == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "dormant serving" in err


def test_serve_without_the_dashboard(cli: Cli) -> None:
    """``--no-ui`` serves the API without /ui (and without its sampler)."""
    cli.ok("init")
    port = free_port()
    proc = subprocess.Popen(
        cli.argv("serve", "--port", str(port), "--no-ui"),
        cwd=cli.cwd,
        env=clean_env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, proc)
        assert httpx.get(url + "/ui/login").status_code == 404
        assert httpx.get(url + "/ui").status_code == 404
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
