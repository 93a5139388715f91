"""Binding keys: normalization, versioning, part hashes."""

from __future__ import annotations

import hashlib

import pytest

from dormant.errors import InvalidInput
from dormant.memory.binding import BINDING_VERSION, bind, check_key, normalize_phone, part_hash, part_hashes


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


def test_key_is_sha256_of_sorted_normalized_parts() -> None:
    expected = hashlib.sha256(b"device=dev1\nphone=+15550100").hexdigest()
    assert bind({"phone": "+1 555 0100", "device": "DEV1"}) == f"b1_{expected}"


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
