"""`/docs`, the interactive docs, served from this server alone, and `/favicon.ico`.

Swagger UI comes from the `swagger-ui-bundle-v2` package, pinned to one release (its files are
upstream's `swagger-ui-dist` of the same version, byte for byte: `tests/api/test_docs.py`
checks their hashes), never from a CDN: the page shares its origin with the console, so a
script fetched from elsewhere would run with the console's origin, and a floating CDN version
changes what runs without a release of ours. The page has no inline script (its one script of
ours is `api/static/docs.js`) and a policy that admits this server's scripts, styles and
requests only.
"""

from __future__ import annotations

import logging
from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, FastAPI
from starlette.responses import FileResponse, HTMLResponse, Response

from api.problems import problem_response, route_not_found

log = logging.getLogger(__name__)

SWAGGER_UI_VERSION = "5.31.0"  # the pinned swagger-ui-bundle-v2 (pyproject.toml)
ASSETS = f"/docs/assets/{SWAGGER_UI_VERSION}"  # versioned: cached for good
SWAGGER_FILES = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
}
OWN_FILES = {"docs.js": "text/javascript; charset=utf-8"}
IMMUTABLE = "public, max-age=31536000, immutable"
DOCS_HEADERS = {
    "Cache-Control": "no-cache",
    # Swagger UI draws its icons as data: images and sets styles from script (not inline).
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}
ICON_HEADERS = {"Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff"}
OWN = Path(__file__).parent / "static"  # package data (pyproject.toml)

PAGE = f"""<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>Outcome Ledger API</title>
  <link rel="icon" href="/favicon.ico">
  <link rel="stylesheet" href="{ASSETS}/swagger-ui.css">
</head>
<body>
  <noscript>The interactive docs need JavaScript; the API is described in
  <a href="/openapi.json">/openapi.json</a>.</noscript>
  <div id="swagger-ui"></div>
  <script src="{ASSETS}/swagger-ui-bundle.js"></script>
  <script src="{ASSETS}/docs.js"></script>
</body>
</html>
"""


def swagger_ui_folder() -> Path | None:
    """The pinned release's files, or None when the installed package holds another one."""
    try:
        package = Path(str(files("swagger_ui_bundle")))  # a regular package: a folder
    except ModuleNotFoundError:
        return None
    folder = package / "vendor" / f"swagger-ui-{SWAGGER_UI_VERSION}"
    return folder if all((folder / name).is_file() for name in SWAGGER_FILES) else None


def install(app: FastAPI) -> None:
    """Serve the docs page, its assets and the favicon (none in /openapi.json)."""
    router = APIRouter(include_in_schema=False)
    icon = (OWN / "favicon.ico").read_bytes()
    swagger = swagger_ui_folder()
    if swagger is None:
        log.warning(
            "/docs is off: swagger-ui-bundle-v2==%s is not installed (reinstall the package)",
            SWAGGER_UI_VERSION,
        )

    @router.get("/favicon.ico")
    async def favicon() -> Response:
        return Response(icon, media_type="image/x-icon", headers=ICON_HEADERS)

    @router.get("/docs")
    async def docs() -> Response:
        if swagger is None:
            return problem_response(route_not_found())
        return HTMLResponse(PAGE, headers=DOCS_HEADERS)

    @router.get(ASSETS + "/{name}")
    async def asset(name: str) -> Response:
        # Only the files named here: the package's folder also holds a demo page and maps.
        headers = {"Cache-Control": IMMUTABLE, "X-Content-Type-Options": "nosniff"}
        if swagger is not None and name in SWAGGER_FILES:
            return FileResponse(swagger / name, media_type=SWAGGER_FILES[name], headers=headers)
        if swagger is not None and name in OWN_FILES:
            return FileResponse(OWN / name, media_type=OWN_FILES[name], headers=headers)
        return problem_response(route_not_found())

    app.include_router(router)
