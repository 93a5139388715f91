"""Settings: validated once, from DORMANT_* variables and overrides."""

from __future__ import annotations

import pytest

from dormant.config import RSS_ALIASES, Settings
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


def test_rss_settings_answer_to_their_earlier_memory_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """The governor's settings are rss_*; the earlier memory_* names (and DORMANT_MEMORY_*
    variables) still set them, and the new name wins when both are given."""
    monkeypatch.setenv("DORMANT_MEMORY_LIMIT", "512M")
    monkeypatch.setenv("DORMANT_MEMORY_GOVERNOR", "false")
    settings = Settings.from_env()
    assert settings.rss_limit == 512 << 20 and settings.rss_governor is False
    monkeypatch.setenv("DORMANT_RSS_LIMIT", "1G")
    assert Settings.from_env().rss_limit == 1 << 30
    assert Settings.build(memory_warn=0.5).rss_warn == 0.5
    assert set(RSS_ALIASES) == {name for name in Settings.model_fields if name.startswith("rss_")}
    assert not any(name.startswith("memory_") for name in Settings.model_fields)
