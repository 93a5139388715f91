"""Settings: validated once, from DORMANT_* variables and overrides."""

from __future__ import annotations

import pytest

from dormant.config import Settings
from dormant.errors import UsageError


def test_defaults_are_valid() -> None:
    s = Settings.build()
    assert s.concurrency == 64 and s.max_rounds == 8 and s.worker_id is None


def test_environment_then_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DORMANT_CONCURRENCY", "7")
    monkeypatch.setenv("DORMANT_LEASE_S", "2.5")
    monkeypatch.setenv("DORMANT_POLL_S", "")
    s = Settings.from_env(lease_s=4.0, worker_id=None)
    assert s.concurrency == 7
    assert s.lease_s == 4.0
    assert s.poll_s == 0.2


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"synchronous": "OFF"}, "synchronous"),
        ({"lease_s": -1}, "lease_s"),
        ({"no_such": 1}, "no_such"),
    ],
)
def test_bad_settings_name_the_setting(values: dict[str, object], needle: str) -> None:
    with pytest.raises(UsageError, match=needle):
        Settings.build(**values)


def test_bad_environment_value_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DORMANT_MAX_ROUNDS", "lots")
    with pytest.raises(UsageError, match="max_rounds"):
        Settings.from_env()


def test_settings_are_frozen() -> None:
    s = Settings.build()
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen error type is an implementation detail
        s.concurrency = 3
