"""The fair-claim rule, pure: places, ties, caps."""

from __future__ import annotations

from dormant.store.fairness import pick, room


def threads(prefix: str, n: int, key: float) -> list[tuple[str, float]]:
    return [(f"{prefix}{i}", key + i) for i in range(n)]


def test_one_tenant_is_ready_key_order() -> None:
    assert pick({"": threads("x", 5, 10.0)}, {}, 3) == ["x0", "x1", "x2"]
    assert pick({"": threads("x", 5, 10.0)}, {"": 7}, 3) == ["x0", "x1", "x2"]


def test_places_alternate_between_tenants_whatever_their_keys() -> None:
    old = threads("a", 10, 0.0)  # aged bulk input: every key smaller than b's
    new = threads("b", 10, 1_000.0)
    assert pick({"A": old, "B": new}, {}, 4) == ["a0", "b0", "a1", "b1"]


def test_the_tenant_holding_fewer_leases_comes_first() -> None:
    got = pick({"A": threads("a", 10, 0.0), "B": threads("b", 10, 1_000.0)}, {"A": 3}, 4)
    assert got == ["b0", "b1", "b2", "a0"]  # b's places 1, 2, 3 before a's 4 (key breaks the tie)


def test_the_cap_counts_leases_held() -> None:
    assert room(0, 16, 0) == 16 and room(5, 16, 3) == 0 and room(1, 16, 3) == 2
    got = pick({"A": threads("a", 10, 0.0), "B": threads("b", 1, 5.0)}, {"A": 1}, 10, cap=3)
    assert got == ["b0", "a0", "a1"]
    assert pick({"A": threads("a", 10, 0.0)}, {"A": 3}, 10, cap=3) == []
