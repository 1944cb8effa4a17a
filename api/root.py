"""`GET /`: a person who opens the server's address lands on the interactive docs."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import RedirectResponse

router = APIRouter()


@router.get("/", include_in_schema=False)
async def root() -> RedirectResponse:
    # A relative Location: never built from the Host header the client sent.
    return RedirectResponse("/docs", status_code=307)
