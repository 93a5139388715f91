"""Errors as HTTP responses, through the one table in :mod:`dormant.errors`.

Every error body is ``{"error": {"code": ..., "message": ...}}`` (on the OpenAI-compatible
routes OpenAI's shape, which adds ``type`` and ``param``: :mod:`.openai_errors`); an
:class:`~dormant.errors.Overloaded` answer carries ``Retry-After``. Request
validation failures are ``invalid_input`` (422); an unexpected exception is
``internal_error`` (500), logged with its traceback and never shown to the client.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from ..errors import DormantError, Overloaded, http_status
from . import openai_errors

log = logging.getLogger("dormant.server")

#: Codes of plain HTTP errors raised by the framework (unknown route, wrong method).
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 401: "unauthenticated", 413: "payload_too_large"}


def body(code: str, message: str) -> dict[str, dict[str, str]]:
    """The JSON error body."""
    return {"error": {"code": code, "message": message}}


def body_for(path: str, code: str, message: str, status: int, param: str | None = None) -> dict[str, Any]:
    """The error body for a request to ``path``: OpenAI's shape on its routes, else :func:`body`."""
    if openai_errors.is_openai(path):
        return openai_errors.shape(code, message, status, param)
    return body(code, message)


def error_response(exc: DormantError, path: str = "") -> JSONResponse:
    """The response for ``exc`` (to a request for ``path``): its status from the table, its
    code, Retry-After if overloaded."""
    headers: dict[str, str] = {}
    if isinstance(exc, Overloaded):
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after)))
    if http_status(exc) == 401:
        headers["WWW-Authenticate"] = "Bearer"
    status = http_status(exc)
    return JSONResponse(body_for(path, exc.code, str(exc), status), status_code=status, headers=headers)


def install(app: FastAPI) -> None:
    """Register the error handlers on ``app``."""

    async def on_dormant(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, DormantError)
        if http_status(exc) >= 500:
            log.error(
                "request_failed", extra={"path": request.url.path, "error": f"{type(exc).__name__}: {exc}"}
            )
        return error_response(exc, request.url.path)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        parts = []
        param = None
        for err in exc.errors()[:5]:
            where = ".".join(str(p) for p in err.get("loc", ()))
            param = param or ".".join(str(p) for p in err.get("loc", ())[1:]) or None
            parts.append(f"{where}: {err.get('msg', 'invalid')}")
        message = "; ".join(parts) or "invalid request"
        return JSONResponse(body_for(request.url.path, "invalid_input", message, 422, param), status_code=422)

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        return JSONResponse(
            body_for(request.url.path, code, str(exc.detail), exc.status_code),
            status_code=exc.status_code,
            headers=dict(exc.headers or {}),
        )

    async def on_other(request: Request, exc: Exception) -> JSONResponse:
        log.exception("request_crashed", extra={"path": request.url.path})
        return JSONResponse(
            body_for(request.url.path, "internal_error", "internal server error", 500), status_code=500
        )

    app.add_exception_handler(DormantError, on_dormant)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(Exception, on_other)
