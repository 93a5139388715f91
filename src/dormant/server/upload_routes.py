"""``POST /v1/threads/{id}/inputs`` with a ``multipart/form-data`` body: files streamed.

The route shares its path with the JSON one (:mod:`.routes`); :class:`MultipartRoute`
matches only a multipart request, so each body finds its own parser. The form is read
by :func:`.multipart.read_form` (files to a temporary directory as they arrive, every
limit checked on the way), its text fields checked as the JSON route's are
(:func:`.validation.check_text`, then :class:`~.schemas.InputCreate`), then the input
goes through :func:`.calls.send_input` like a JSON one: the parts checked and stored,
then the input admitted, the same ``Idempotency-Key`` rules (the fingerprint covers
the fields and each file's SHA-256). The directory is removed when the request ends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.routing import Match
from starlette.types import Scope

from ..errors import InvalidInput
from ..parts import Limits
from . import calls
from .idempotency import fingerprint
from .multipart import FIELDS, is_multipart, read_form, spool_folder
from .routes import ERRORS, IdempotencyKey, TenantScope
from .schemas import AdmissionOut, InputCreate
from .state import state_of
from .validation import check_text


class MultipartRoute(APIRoute):
    """A route that matches only ``multipart/form-data`` requests to a thread's inputs."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if not is_multipart(scope):
            return Match.NONE, {}
        return super().matches(scope)


router = APIRouter(prefix="/v1", tags=["threads"], responses=ERRORS)


def input_of(fields: dict[str, str]) -> InputCreate:
    """The form's text fields as the JSON route's body (422 as it would answer)."""
    for name, value in fields.items():
        check_text(value, f"form field {name!r}")
    document: dict[str, Any] = {k: v for k, v in fields.items() if k in FIELDS and k != "text"}
    document.setdefault("content", "")
    if "priority" in document:
        try:
            document["priority"] = int(document["priority"])
        except ValueError:
            raise InvalidInput("form field 'priority': 0, 1 or 2") from None
    try:
        return InputCreate.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidInput(f"form field {where!r}: {first['msg']}") from None


async def post_input_form(
    request: Request, scope: TenantScope, thread_id: str, idempotency_key: IdempotencyKey = None
) -> AdmissionOut:
    """Admit user text with images and files uploaded as ``multipart/form-data`` (fields
    ``content``, ``agent``, ``priority``, ``strategy``; files ``image`` / ``file``,
    repeated, each optionally followed by a ``text`` field); 202 once durable. The files
    stream to disk as they arrive; a limit passed answers 413/415/422 at once, reading
    no further, with nothing written."""
    state = state_of(request)
    rt = state.runtime
    limits = Limits.of(rt.settings)
    with spool_folder() as folder:
        form = await read_form(
            request.stream(),
            request.headers.get("content-type", ""),
            Path(folder),
            limits,
            max_content=rt.settings.max_input_bytes,
        )
        body = input_of(form.fields)
        for upload in form.uploads:
            for what, value in (("file name", upload.name), ("text", upload.text)):
                if value is not None:
                    check_text(value, f"the {what} of a form file")
        files = [[u.kind, u.name, u.text, u.digest.hexdigest()] for u in form.uploads]
        return await calls.send_input(
            rt,
            scope,
            thread_id,
            body,
            dedup_key=idempotency_key,
            quotas=state.quotas,
            hub=state.hub,
            media=[u.part() for u in form.uploads],
            fingerprint=fingerprint({"body": body.model_dump(mode="json"), "files": files}),
        )


router.add_api_route(
    "/threads/{thread_id}/inputs",
    post_input_form,
    methods=["POST"],
    status_code=202,
    response_model=AdmissionOut,
    route_class_override=MultipartRoute,
    include_in_schema=False,  # the JSON route's operation documents both bodies (FORM_DOC)
)
