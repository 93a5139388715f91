"""A thread's images and files on the dashboard: ``GET /ui/threads/{id}/blobs/{ref}``.

The viewer's session decides what it may read, as for every other page: a tenant's
key reads only its own threads' blobs, and a ref the thread (or an ancestor) does not
refer to answers 404 whether or not it exists elsewhere. The bytes are streamed from
the store in bounded chunks (nothing held whole in RAM), with the media type sniffed
from them as at admission, ``X-Content-Type-Options: nosniff``, ``Cache-Control:
private``, and ``Content-Disposition: inline`` only for a PNG, JPEG, WebP or GIF image:
anything else (a PDF, an SVG, HTML, unknown bytes) is an ``attachment``, never drawn in
the dashboard's origin. Images are shown as stored: they were downscaled at admission,
and the page bounds the thumbnail's drawn size.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from ...errors import InvalidInput, NotFound
from ...tools.blobs import MAX_READ
from ..state import state_of
from ..uploads import served_type
from .pages import HEADERS, INLINE, guarded, stored_thread_id, viewer_of

router = APIRouter(prefix="/ui", include_in_schema=False)

REF_CHARS = frozenset("0123456789abcdef")


def _ref(raw: str) -> str:
    """``raw`` if it is a blob ref (``sha256:`` and 64 hex digits); NotFound otherwise."""
    digest = raw.removeprefix("sha256:")
    if not raw.startswith("sha256:") or len(digest) != 64 or not set(digest) <= REF_CHARS:
        raise NotFound("no such blob")
    return raw


@router.get("/threads/{thread_id:path}/blobs/{ref}")
@guarded("thread_blob")
async def thread_blob(request: Request) -> Response:
    """The bytes of one of a thread's blobs, streamed (see the module's docstring)."""
    viewer = viewer_of(request)
    store = state_of(request).runtime.store
    try:
        thread_id = stored_thread_id(viewer, request.path_params["thread_id"])
    except InvalidInput:  # not an id of the viewer's tenant: as unknown as any other
        raise NotFound("no such blob") from None
    ref = _ref(request.path_params["ref"])
    blob = await store.get_blob(thread_id, ref, tenant=viewer.tenant)
    head = await store.read_blob(thread_id, ref, 0, MAX_READ, tenant=viewer.tenant)
    media_type = served_type(head)
    disposition = "inline" if media_type in INLINE else "attachment"

    async def chunks() -> AsyncIterator[bytes]:
        yield head
        offset = len(head)
        while offset < blob.size:
            data = await store.read_blob(thread_id, ref, offset, MAX_READ, tenant=viewer.tenant)
            if not data:
                return
            offset += len(data)
            yield data

    headers = {
        **HEADERS,
        "Content-Length": str(blob.size),
        "Content-Disposition": disposition,
        "Cache-Control": "private, max-age=300",
    }
    return StreamingResponse(chunks(), media_type=media_type, headers=headers)
