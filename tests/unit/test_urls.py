"""Store URLs fit to show: no password in output, logs or error text."""

from __future__ import annotations

import logging

import pytest

from dormant import urls

SECRET = "s3cr%21t-pw"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"postgresql://app:{SECRET}@db.example:5432/prod", "postgresql://app:***@db.example:5432/prod"),
        (f"postgresql://db/prod?user=app&password={SECRET}", "postgresql://db/prod?user=app&password=***"),
        (f"host=db user=app password={SECRET} dbname=prod", "host=db user=app password=*** dbname=prod"),
        ("postgresql://app@db/prod", "postgresql://app@db/prod"),
        ("sqlite:///var/lib/dormant.db", "sqlite:///var/lib/dormant.db"),
        ("memory://", "memory://"),
    ],
)
def test_redact_hides_every_form_of_password(url: str, shown: str) -> None:
    assert urls.redact(url) == shown


def test_a_bad_port_is_still_redacted_without_raising() -> None:
    assert (
        urls.redact(f"postgresql://app:{SECRET}@db:notaport/prod") == "postgresql://app:***@db:notaport/prod"
    )


def test_scrub_removes_remembered_secrets_from_any_text() -> None:
    urls.remember(f"postgresql://app:{SECRET}@db/prod")
    decoded = "s3cr!t-pw"  # a driver may quote the password unquoted
    text = f"cannot connect with password {SECRET} / {decoded!r} to 'postgresql://other:xyz123@h/db'"
    scrubbed = urls.scrub(text)
    assert SECRET not in scrubbed and decoded not in scrubbed and "xyz123" not in scrubbed
    assert "cannot connect" in scrubbed


def test_remembered_secrets_are_bounded() -> None:
    for n in range(urls.MAX_SECRETS * 3):
        urls.remember(f"postgresql://app:secret-{n:04d}@db/prod")
    assert len(urls._secrets) <= urls.MAX_SECRETS


def test_the_cli_log_format_scrubs_store_passwords() -> None:
    from dormant.cli.main import EventFormatter

    urls.remember(f"postgresql://app:{SECRET}@db/prod")
    record = logging.makeLogRecord(
        {"name": "dormant.store", "levelname": "ERROR", "msg": "store_failed", "error": f"at {SECRET!r}"}
    )
    line = EventFormatter().format(record)
    assert "store_failed" in line and SECRET not in line
