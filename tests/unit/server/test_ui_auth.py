"""The dashboard's session cookies and CSRF tokens, without a server."""

from __future__ import annotations

from dormant.server.ui.auth import Sessions, same_origin


def test_a_session_names_its_viewer_until_it_expires_and_a_forgery_names_none() -> None:
    s = Sessions(ttl_s=60)
    op, tenant = s.issue(None, now=1000.0), s.issue("t0123456789ab", now=1000.0)
    viewer = s.check(op, now=1059.0)
    assert viewer is not None and viewer.operator
    seen = s.check(tenant, now=1000.0)
    assert seen is not None and seen.tenant == "t0123456789ab" and not seen.operator
    assert s.check(op, now=1061.0) is None  # expired
    body, _, mac = tenant.partition(".")
    assert s.check(f"{body}x.{mac}", now=1000.0) is None
    assert s.check(op.replace(op.split(".")[0], tenant.split(".")[0]), now=1000.0) is None
    assert s.check(tenant, now=1000.0) is not None and Sessions().check(tenant, now=1000.0) is None
    for junk in (None, "", "x", "a.b", "." * 2000):
        assert s.check(junk) is None


def test_csrf_tokens_are_per_session_and_a_derived_secret_is_shared() -> None:
    s = Sessions()
    a = s.check(s.issue(None))
    b = s.check(s.issue(None))
    assert a is not None and b is not None
    assert s.csrf_ok(a, s.csrf(a)) and not s.csrf_ok(a, s.csrf(b)) and not s.csrf_ok(a, None)
    one, two = Sessions(Sessions.derive("x" * 32)), Sessions(Sessions.derive("x" * 32))
    assert two.check(one.issue(None)) is not None
    assert Sessions(Sessions.derive("y" * 32)).check(one.issue(None)) is None


def test_same_origin() -> None:
    assert same_origin(None, "h:1") and same_origin("http://h:1", "h:1") and same_origin("https://h:1", "h:1")
    assert not same_origin("https://evil.example", "h:1") and not same_origin("null", "h:1")
    assert not same_origin("http://h:1", None)
