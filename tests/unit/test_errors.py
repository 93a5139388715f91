"""The error hierarchy: who must act, stable codes, one HTTP status table."""

from __future__ import annotations

import pytest

from dormant import errors
from dormant.errors import (
    HTTP_STATUS,
    Busy,
    DormantError,
    InvalidInput,
    LeaseLost,
    ModelError,
    NotFound,
    Overloaded,
    PayloadTooLarge,
    SchemaError,
    StoreError,
    StoreFull,
    StoreLocked,
    StoreUnreachable,
    ToolError,
    Unauthenticated,
    UsageError,
    http_status,
)


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (DormantError("x"), 500),
        (UsageError("x"), 400),
        (NotFound("x"), 404),
        (InvalidInput("x"), 422),
        (PayloadTooLarge("x"), 413),
        (Unauthenticated("x"), 401),
        (Busy("x"), 409),
        (StoreError("x"), 503),
        (StoreFull("x"), 507),
        (StoreLocked("x"), 503),
        (StoreUnreachable("x"), 503),
        (SchemaError("x"), 500),
        (Overloaded("x", retry_after=2.0), 429),
        (LeaseLost("x"), 409),
        (ModelError("x"), 502),
        (ToolError("x"), 502),
    ],
)
def test_http_status_of_each_error(exc: DormantError, status: int) -> None:
    assert http_status(exc) == status


def test_a_subclass_gets_its_nearest_ancestors_status() -> None:
    class TenantMissing(NotFound):
        code = "tenant_missing"

    assert http_status(TenantMissing("x")) == 404


def test_every_error_class_has_a_unique_code_and_a_status() -> None:
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, DormantError)]
    codes = [c.code for c in classes]
    assert len(codes) == len(set(codes))
    assert set(classes) == set(HTTP_STATUS)


def test_hierarchy_splits_by_who_must_act() -> None:
    assert issubclass(NotFound, UsageError) and issubclass(InvalidInput, UsageError)
    for store_cls in (StoreFull, StoreLocked, StoreUnreachable, SchemaError):
        assert issubclass(store_cls, StoreError)
    for cls in (UsageError, StoreError, Overloaded, LeaseLost, ModelError, ToolError):
        assert issubclass(cls, DormantError)


def test_error_details() -> None:
    assert Overloaded("busy", retry_after=3.5).retry_after == 3.5
    err = ModelError("rate limited", retry_after=2.0)
    assert err.retryable and err.retry_after == 2.0
    assert not ModelError("bad request", retryable=False).retryable
    assert not ToolError("x").retryable and ToolError("x", retryable=True).retryable


def test_model_error_kinds() -> None:
    plain = ModelError("x")
    assert (plain.kind, plain.outage, plain.context_overflow) == ("error", False, False)
    down = ModelError("down", retry_after=4.0, kind="outage")
    assert down.outage and not down.context_overflow and down.retry_after == 4.0
    long = ModelError("too long", retryable=False, kind="context_overflow")
    assert long.context_overflow and not long.outage and not long.retryable
