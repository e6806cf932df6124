"""The moderators' web page at ``/`` (the package's index.html); its scripts and styles are served under ``/static``."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

STATIC = Path(__file__).parents[2] / "static"
router = APIRouter()


@router.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
async def page() -> FileResponse:
    return FileResponse(STATIC / "index.html")
