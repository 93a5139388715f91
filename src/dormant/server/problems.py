"""Errors as HTTP responses, through the one table in :mod:`dormant.errors`.

Every error body is ``{"error": {"code": ..., "message": ...}}``; an
:class:`~dormant.errors.Overloaded` answer carries ``Retry-After``. Request
validation failures are ``invalid_input`` (422); an unexpected exception is
``internal_error`` (500), logged with its traceback and never shown to the client.
"""

from __future__ import annotations

import logging
import math

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from ..errors import DormantError, Overloaded, http_status

log = logging.getLogger("dormant.server")

#: Codes of plain HTTP errors raised by the framework (unknown route, wrong method).
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 401: "unauthenticated", 413: "payload_too_large"}


def body(code: str, message: str) -> dict[str, dict[str, str]]:
    """The JSON error body."""
    return {"error": {"code": code, "message": message}}


def error_response(exc: DormantError) -> JSONResponse:
    """The response for ``exc``: its status from the table, its code, Retry-After if overloaded."""
    headers: dict[str, str] = {}
    if isinstance(exc, Overloaded):
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after)))
    if http_status(exc) == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse(body(exc.code, str(exc)), status_code=http_status(exc), headers=headers)


def install(app: FastAPI) -> None:
    """Register the error handlers on ``app``."""

    async def on_dormant(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, DormantError)
        if http_status(exc) >= 500:
            log.error(
                "request_failed", extra={"path": request.url.path, "error": f"{type(exc).__name__}: {exc}"}
            )
        return error_response(exc)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        parts = []
        for err in exc.errors()[:5]:
            where = ".".join(str(p) for p in err.get("loc", ()))
            parts.append(f"{where}: {err.get('msg', 'invalid')}")
        return JSONResponse(body("invalid_input", "; ".join(parts) or "invalid request"), status_code=422)

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        return JSONResponse(
            body(code, str(exc.detail)), status_code=exc.status_code, headers=dict(exc.headers or {})
        )

    async def on_other(request: Request, exc: Exception) -> JSONResponse:
        log.exception("request_crashed", extra={"path": request.url.path})
        return JSONResponse(body("internal_error", "internal server error"), status_code=500)

    app.add_exception_handler(DormantError, on_dormant)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(Exception, on_other)
