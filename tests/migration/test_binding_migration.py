"""A store made before binding keys became keyed hashes (``data/b1_store.db.gz``, made by
``b1_store.py`` with that version's code: ``b1_`` keys, memories with their history,
threads bound to subjects) opened by this version: the schema migration gives it a
binding secret and marks it, and binding an identity moves everything of its old key to
its new key."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import apsw

from dormant import Agent, ModelReply, Runtime, ScriptedModel
from dormant.memory.binding import legacy_bind, legacy_part_hashes
from dormant.store.sqlite import SCHEMA_VERSION
from dormant.subject import SubjectOptions
from tests.integration.conftest import fast_settings

FIXTURE = Path(__file__).with_name("data") / "b1_store.db.gz"
IDENTITY = {"phone": "+1 555 0100", "device": "ios-1"}
OTHER = {"phone": "+1 555 0100", "device": "android-2"}


def old_store(tmp_path: Path) -> Path:
    path = tmp_path / "b1.db"
    path.write_bytes(gzip.decompress(FIXTURE.read_bytes()))
    return path


def rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    conn = apsw.Connection(str(path))
    try:
        return [tuple(r) for r in conn.execute(sql)]
    finally:
        conn.close()


def agent() -> Agent:
    return Agent(name="a", model=ScriptedModel(lambda req: ModelReply(text="ok")), subject=SubjectOptions())


async def test_the_fixture_is_a_store_of_the_previous_scheme(tmp_path: Path) -> None:
    path = old_store(tmp_path)
    old = legacy_bind(IDENTITY)
    assert rows(path, "SELECT version FROM schema_version") == [(9,)]
    assert rows(path, "SELECT count(*) FROM memory_records WHERE subject = '" + old + "'") == [(4,)]
    assert {r[0] for r in rows(path, "SELECT subject FROM threads")} == {old, legacy_bind(OTHER)}


async def test_binding_moves_every_memory_history_and_thread_subject_to_the_new_key(tmp_path: Path) -> None:
    path = old_store(tmp_path)
    old, other_old = legacy_bind(IDENTITY), legacy_bind(OTHER)
    history_before = rows(path, "SELECT count(*) FROM memory_history")[0][0]
    async with Runtime(f"sqlite:///{path}", [agent()], settings=fast_settings()) as rt:
        assert (await rt.store.status()).schema_version == SCHEMA_VERSION
        key = await rt.memory.bind(IDENTITY)
        assert key.startswith("b2_") and key != old
        lines = b"device=ios-1\nphone=+15550100"
        assert key[3:] != hashlib.sha256(lines).hexdigest()
        # every memory of the old key is kept under the new one, the superseded one too
        found = await rt.memory.recall([key], k=10, history=True)
        assert sorted(h.record.text for h in found.hits) == [
            "complained about a late parcel",
            "ships to 1 Main Street",
            "ships to 2 Oak Avenue",
            "speaks Portuguese",
        ]
        valid = await rt.memory.recall([key], k=10)
        assert "ships to 1 Main Street" not in {h.record.text for h in valid.hits}, "still superseded"
        assert len(valid.hits) == 3
        # and their history, with the move audited
        changes = [c for c in (await rt.memory.history([key], limit=100)).items]
        assert {c.op for c in changes} >= {"add", "supersede", "rebind"}
        # the old key still reaches them (through the move): a client that kept it loses nothing
        assert len((await rt.memory.recall([old], k=10, history=True)).hits) == 4
        # the threads' subjects followed, journaled (time travel and recovery see the new key)
        assert (await rt.registers("a"))["subject"] == key
        assert (await rt.registers("b"))["subject"] == key
        assert await rt.store.subject_threads("a", key) == ["b"]
        # a second bind moves nothing again
        assert await rt.memory.bind(IDENTITY) == key
        assert len((await rt.memory.recall([key], k=10, history=True)).hits) == 4
        # the other identity sharing the phone: still apart, still its old key until bound
        assert (await rt.registers("c"))["subject"] == other_old
        assert [k for k in (await rt.memory.keys_for("phone", "+15550100")).items] == sorted([key, other_old])
        other = await rt.memory.bind(OTHER)
        texts = [h.record.text for h in (await rt.memory.recall([other], k=10)).hits]
        assert texts == ["ships to 9 Elm Road"]
        assert (await rt.registers("c"))["subject"] == other
        assert sorted((await rt.memory.keys_for("phone", "+1 555 0100")).items) == sorted([key, other])
    assert int(str(rows(path, "SELECT count(*) FROM memory_history")[0][0])) > int(str(history_before))
    # no unkeyed part hash (sha256 of "phone=...") is left to reveal the phone
    unkeyed = set(legacy_part_hashes(IDENTITY).values()) | set(legacy_part_hashes(OTHER).values())
    assert not unkeyed & {r[0] for r in rows(path, "SELECT part_hash FROM memory_identity")}
    assert not rows(path, "SELECT 1 FROM memory_records WHERE subject LIKE 'b1%'")
    assert not rows(path, "SELECT 1 FROM threads WHERE subject LIKE 'b1%'")


async def test_sending_with_the_identity_migrates_too(tmp_path: Path) -> None:
    path = old_store(tmp_path)
    async with Runtime(f"sqlite:///{path}", [agent()], settings=fast_settings()) as rt:
        await rt.send("a", "hello again", identity=IDENTITY)
        await rt.run_until_idle(timeout=30)
        regs = await rt.registers("a")
        assert regs["subject"].startswith("b2_")
        assert len((await rt.memory.recall([regs["subject"]], k=10, history=True)).hits) == 4
