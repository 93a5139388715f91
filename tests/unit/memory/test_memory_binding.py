"""Binding keys: normalization, versioning, part hashes."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

import pytest

from dormant.errors import InvalidInput
from dormant.memory import binding
from dormant.memory.binding import (
    BINDING_VERSION,
    check_key,
    check_secret,
    legacy_bind,
    legacy_part_hashes,
    normalize_phone,
)

SECRET = b"s" * 32


def bind(parts: Mapping[str, str], tenant: str = "") -> str:
    return binding.bind(parts, secret=SECRET, tenant=tenant)


def part_hashes(parts: Mapping[str, str]) -> dict[str, str]:
    return binding.part_hashes(parts, secret=SECRET, tenant="")


def part_hash(name: str, value: str) -> str:
    return binding.part_hash(name, value, secret=SECRET, tenant="")


def test_phone_normalization() -> None:
    assert normalize_phone("+1 (555) 010-0100") == "+15550100100"
    assert normalize_phone("0044 20 7946 0000") == "+442079460000"
    assert normalize_phone("555.0100") == "5550100"


def test_same_identity_same_key_whatever_the_spelling() -> None:
    a = bind({"phone": "+1 555 0100", "device": "iPhone-A"})
    b = bind({"device": "iphone-a", "phone": "+1-555-0100"})
    assert a == b
    assert a.startswith(BINDING_VERSION + "_")
    assert check_key(a) == a


def test_key_is_an_hmac_of_tenant_and_parts_not_their_sha256() -> None:
    parts = {"phone": "+1 555 0100", "device": "DEV1"}
    lines = b"device=dev1\nphone=+15550100"
    key = bind(parts)
    assert key.startswith("b2_")
    assert key != f"b2_{hashlib.sha256(lines).hexdigest()}"
    assert key[3:] != hashlib.sha256(lines).hexdigest()
    assert key[3:] == hmac.new(SECRET, b"key\0\0" + lines, hashlib.sha256).hexdigest()
    # the previous scheme, still computed to find an old store's keys
    assert legacy_bind(parts) == f"b1_{hashlib.sha256(lines).hexdigest()}"
    assert legacy_part_hashes(parts)["phone"] == hashlib.sha256(b"phone=+15550100").hexdigest()


def test_the_same_phone_in_two_tenants_or_under_two_secrets_gives_two_keys() -> None:
    phone = {"phone": "+15550100"}
    assert bind(phone, "t000000000001") != bind(phone, "t000000000002")
    assert bind(phone, "t000000000001") == bind(phone, "t000000000001")
    assert binding.bind(phone, secret=b"x" * 32, tenant="") != bind(phone)
    assert binding.part_hash("phone", "+15550100", secret=SECRET, tenant="t000000000001") != part_hash(
        "phone", "+15550100"
    )
    assert part_hash("phone", "+15550100") != hashlib.sha256(b"phone=+15550100").hexdigest()


def test_a_short_or_missing_secret_is_refused() -> None:
    with pytest.raises(InvalidInput, match="at least 32"):
        check_secret("short")
    assert check_secret("k" * 32) == b"k" * 32
    with pytest.raises(InvalidInput):
        binding.bind({"phone": "1"}, secret=b"", tenant="")


def test_shared_phone_different_devices_are_different_subjects() -> None:
    a = bind({"phone": "+15550100", "device": "d1"})
    b = bind({"phone": "+15550100", "device": "d2"})
    assert a != b
    # but both are reachable through the phone's own hash (the link table)
    assert part_hashes({"phone": "+15550100", "device": "d1"})["phone"] == part_hash("phone", "+1 555 0100")


@pytest.mark.parametrize(
    "parts",
    [{}, {"phone": "()"}, {"Bad Name": "x"}, {"phone": "1" * 300}, {f"p{i}": "x" for i in range(17)}],
)
def test_bad_parts_are_refused(parts: dict[str, str]) -> None:
    with pytest.raises(InvalidInput):
        bind(parts)


@pytest.mark.parametrize("key", ["", "b1_xyz", "b1_" + "A" * 64, "x" * 67, "b1_" + "0" * 63])
def test_check_key_refuses_malformed(key: str) -> None:
    with pytest.raises(InvalidInput):
        check_key(key)
