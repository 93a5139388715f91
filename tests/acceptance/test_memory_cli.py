"""``dormant memory`` end to end in subprocesses (hashing embedder: no model load)."""

from __future__ import annotations

import json
from pathlib import Path

from .runner import Cli, assert_usage_error

ENV = {"DORMANT_MEMORY_EMBEDDER": "hashing"}
ALICE = ["-i", "phone=+1 555 0100", "-i", "device=alice"]
BOB = ["-i", "phone=+15550100", "-i", "device=bob"]


def test_add_search_supersede_history_forget_rebind(tmp_path: Path) -> None:
    cli = Cli(tmp_path, f"sqlite:///{tmp_path}/m.db")
    first = json.loads(
        cli.ok("memory", "add", "Ship to 12 Oak Street", *ALICE, "-t", "key=addr", "--json", env=ENV)
    )
    second = json.loads(
        cli.ok("memory", "add", "Ship to 44 Pine Road", *ALICE, "-t", "key=addr", "--json", env=ENV)
    )
    assert second["superseded"] == [first["id"]]
    cli.ok("memory", "add", "Bob ships to Elm Street", *BOB, env=ENV)
    hits = cli.ok("memory", "search", "ship street", *ALICE, "--json", env=ENV).splitlines()
    assert [json.loads(h)["record"]["text"] for h in hits] == ["Ship to 44 Pine Road"]
    old = cli.ok("memory", "search", "ship", *ALICE, "--history", env=ENV)
    assert "12 Oak Street" in old and "invalid since" in old and "Elm" not in old
    ops = [json.loads(x)["op"] for x in cli.ok("memory", "history", *ALICE, "--json").splitlines()]
    assert ops == ["add", "supersede", "add"]
    page = cli("memory", "history", *ALICE, "--limit", "2")
    assert page.returncode == 0 and "more: --cursor" in page.stderr
    cli.ok("memory", "forget", second["id"], *ALICE, "--reason", "moved abroad")
    assert cli.ok("memory", "search", "ship", *ALICE, env=ENV).strip() == ""
    alice = cli.ok("memory", "bind", "phone=+15550100", "device=alice").strip()
    new = cli.ok("memory", "bind", "phone=+15550100", "device=alice-2").strip()
    assert cli.ok("memory", "rebind", alice, new).strip() == "move: 2 records"
    assert "Oak Street" in cli.ok("memory", "show", "-s", new, "--history")


def test_dict_load_and_ingest(tmp_path: Path) -> None:
    cli = Cli(tmp_path, f"sqlite:///{tmp_path}/m.db")
    (tmp_path / "d.csv").write_text("shipped,dispatched,out for delivery\n")
    assert cli.ok("memory", "dict", "load", str(tmp_path / "d.csv")).strip() == "1 synonym groups loaded"
    assert cli.ok("memory", "dict", "show").strip() == "shipped ≈ dispatched ≈ out for delivery"
    shown = json.loads(cli.ok("memory", "dict", "show", "--json"))
    assert shown == {"group": ["shipped", "dispatched", "out for delivery"]}
    (tmp_path / "policy.md").write_text(
        "Returns.\n\nParcels are dispatched within 48 hours.\n\n" + "Filler. " * 300
    )
    done = cli.ok("memory", "ingest", str(tmp_path / "policy.md"), "--chunk-chars", "500", env=ENV)
    key = done.strip().splitlines()[-1].split(": ")[1]
    hit = cli.ok("memory", "search", "when is it shipped", "-s", key, "--k", "1", "--json", env=ENV)
    assert "dispatched within 48 hours" in json.loads(hit)["record"]["text"]


def test_mistakes_are_one_line_errors(tmp_path: Path) -> None:
    cli = Cli(tmp_path, f"sqlite:///{tmp_path}/m.db")
    assert_usage_error(cli("memory", "search", "x", env=ENV), "subject")
    assert_usage_error(cli("memory", "add", "x", "-s", "b1_nope", env=ENV), "binding key")
    assert_usage_error(cli("memory", "add", "x", *ALICE, "--kind", "gossip", env=ENV), "kind")


def test_tenant_is_looked_up_and_scopes_every_command(tmp_path: Path) -> None:
    """``--tenant NAME`` (or id) is the store's tenant: its records are invisible to the
    default tenant and to other tenants; an unknown tenant is an error, not a new scope."""
    cli = Cli(tmp_path, f"sqlite:///{tmp_path}/m.db")
    cli.ok("init")
    cli.ok("tenants", "create", "acme")
    cli.ok("tenants", "create", "globex")
    added = json.loads(
        cli.ok("memory", "add", "acme ships to Oak Street", *ALICE, "--tenant", "acme", "--json", env=ENV)
    )
    assert added["tenant"].startswith("t") and len(added["tenant"]) == 13
    by_id = cli.ok("memory", "search", "ship", *ALICE, "--tenant", added["tenant"], env=ENV)
    assert "acme ships to Oak Street" in by_id
    for other in ([], ["--tenant", "globex"]):
        assert cli.ok("memory", "search", "ship", *ALICE, *other, env=ENV).strip() == ""
    unknown = cli("memory", "search", "ship", *ALICE, "--tenant", "initech", env=ENV)
    assert unknown.returncode != 0 and "initech" in unknown.stderr
    assert "Traceback" not in unknown.stderr + unknown.stdout


def test_add_takes_valid_from_and_search_explains(tmp_path: Path) -> None:
    cli = Cli(tmp_path, f"sqlite:///{tmp_path}/m.db")
    tag = ["-t", "key=shipping_address"]
    cli.ok(
        "memory", "add", "Ship to 9 Mill Lane, Kingston", *ALICE, *tag, "--valid-from", "2026-03-01", env=ENV
    )
    old = json.loads(
        cli.ok(
            "memory",
            "add",
            "Ship to 12 Oak Street, Dover",
            *ALICE,
            *tag,
            "--valid-from",
            "2026-01-01",
            "--json",
            env=ENV,
        )
    )
    assert old["superseded"] == []
    hit = cli.ok(
        "memory", "search", "Which city should the parcel go to?", *ALICE, "--explain", "--k", "1", env=ENV
    )
    assert "Mill Lane" in hit and "why: current value of key shipping_address" in hit
    as_json = cli.ok(
        "memory", "search", "current address", *ALICE, "--explain", "--json", "--k", "1", env=ENV
    )
    assert json.loads(as_json)["explain"]["tier"] == 0
