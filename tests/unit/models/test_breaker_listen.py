"""A breaker that closes after it had opened tells its listeners."""

from __future__ import annotations

import pytest

from dormant.models.breaker import MAX_LISTENERS, CircuitBreaker


def test_listeners_hear_a_close_after_an_open_only() -> None:
    now = [0.0]
    breaker = CircuitBreaker("http://h/v1", threshold=2, cooldown_s=1.0, clock=lambda: now[0])
    heard: list[str] = []
    stop = breaker.listen(heard.append)
    breaker.success()
    breaker.failure()
    breaker.success()
    assert heard == [], "a breaker that never opened does not announce a close"
    breaker.failure()
    breaker.failure()
    assert not breaker.closed
    breaker.success()
    assert heard == ["http://h/v1"] and breaker.closed
    stop()
    breaker.failure()
    breaker.failure()
    breaker.success()
    assert heard == ["http://h/v1"], "a stopped listener hears nothing"


def test_a_failing_listener_does_not_fail_the_caller() -> None:
    breaker = CircuitBreaker("e", threshold=1)

    def broken(endpoint: str) -> None:
        raise RuntimeError("boom")

    heard: list[str] = []
    breaker.listen(broken)
    breaker.listen(heard.append)
    breaker.failure()
    breaker.success()
    assert heard == ["e"]


def test_listeners_are_bounded() -> None:
    breaker = CircuitBreaker("e")
    for _ in range(MAX_LISTENERS):
        breaker.listen(lambda endpoint: None)
    with pytest.raises(ValueError, match="listeners"):
        breaker.listen(lambda endpoint: None)
