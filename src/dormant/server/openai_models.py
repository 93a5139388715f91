"""``GET /v1/models``: the agents this server hosts, as OpenAI models.

An OpenAI-compatible request names its agent in ``model``; :func:`model_agent` is the
one lookup, and a name this server does not host is 404 ``model_not_found`` (never
served silently by another agent). The list is the hosted agents, sorted, paged like
every listing (``after`` + ``limit``; the agents of one server are few, but the page
bound holds anyway).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from ..errors import ModelNotFound
from ..runtime import Runtime
from .routes import ERRORS, TenantScope
from .state import state_of

router = APIRouter(prefix="/v1", tags=["openai"], responses=ERRORS)

#: When the listed models say they were created (the API has no such date: a constant).
CREATED = 0


def model_agent(rt: Runtime, model: str) -> str:
    """The agent ``model`` names; ModelNotFound (404 ``model_not_found``) when not hosted."""
    if model not in rt.agents:
        hosted = ", ".join(sorted(rt.agents))
        raise ModelNotFound(
            f"the model {model!r} does not exist (this server's models are its agents: {hosted})"
        )
    return model


def model_object(name: str) -> dict[str, Any]:
    """One ``model`` object."""
    return {"id": name, "object": "model", "created": CREATED, "owned_by": "dormant"}


@router.get("/models")
async def list_models(
    request: Request,
    scope: TenantScope,
    after: Annotated[str | None, Query(max_length=256)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 1000,
) -> dict[str, Any]:
    """The hosted agents as models (``after``: the last id of the previous page)."""
    names = sorted(state_of(request).runtime.agents)
    if after is not None:
        names = [n for n in names if n > after]
    page = names[:limit]
    return {"object": "list", "data": [model_object(n) for n in page], "has_more": len(names) > limit}


@router.get("/models/{model}")
async def get_model(request: Request, scope: TenantScope, model: str) -> dict[str, Any]:
    """One hosted agent as a model; 404 ``model_not_found`` otherwise."""
    return model_object(model_agent(state_of(request).runtime, model))
