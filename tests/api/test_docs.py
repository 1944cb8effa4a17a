"""`/docs` from this server alone: Swagger UI's files come from the pinned package (the very
bytes of upstream's swagger-ui-dist of that release), nothing is fetched from another site, the
page runs no inline script; and `/favicon.ico` is an icon, not a 404."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.docs import ASSETS, SWAGGER_UI_VERSION, swagger_ui_folder
from ledger.persistence.memory import MemoryStore
from ledger.runtime.ledger import Ledger

# sha256 of the files in npm's swagger-ui-dist@5.31.0 tarball (integrity sha512-zSUTIck02fSga6r…).
UPSTREAM = {
    "swagger-ui-bundle.js": "93b7b0862a80e2786f85b560be7693c2344354ffa7e7e224f850a54349724c31",
    "swagger-ui.css": "9e576f8322132c76949da47f9bb53c891373c303ea3a761ff548ffc9de50a98c",
}


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Ledger(MemoryStore()), None), follow_redirects=False) as client:
        yield client


def test_the_served_swagger_ui_is_the_pinned_upstream_release(client: TestClient) -> None:
    assert SWAGGER_UI_VERSION == "5.31.0"  # bump UPSTREAM with it, from npm's tarball
    assert swagger_ui_folder() is not None
    for name, digest in UPSTREAM.items():
        answer = client.get(f"{ASSETS}/{name}")
        assert answer.status_code == 200, name
        assert hashlib.sha256(answer.content).hexdigest() == digest, name
        assert "immutable" in answer.headers["cache-control"]
        assert answer.headers["x-content-type-options"] == "nosniff"


def test_the_docs_page_loads_nothing_from_another_site(client: TestClient) -> None:
    page = client.get("/docs")
    assert page.status_code == 200
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert sources and all(s.startswith("/") for s in sources), sources
    assert "<script>" not in page.text  # every script is a file of this server
    policy = page.headers["content-security-policy"]
    assert "script-src 'self';" in policy and "unsafe" not in policy
    assert "connect-src 'self'" in policy and "frame-ancestors 'none'" in policy
    for src in sources:
        assert client.get(src).status_code == 200, src
    script = client.get(f"{ASSETS}/docs.js").text
    assert '"/openapi.json"' in script and "validatorUrl: null" in script


def test_only_the_named_assets_are_served(client: TestClient) -> None:
    # The package's folder also holds a demo page (pointing at another site) and source maps.
    for name in ("index.html", "swagger-initializer.js", "swagger-ui-bundle.js.map", "..%2f"):
        answer = client.get(f"{ASSETS}/{name}")
        assert answer.status_code == 404, name
        assert answer.headers["content-type"] == "application/problem+json"
    assert client.get("/docs/assets/4.0.0/swagger-ui.css").status_code == 404


def test_the_docs_are_not_in_the_document_and_the_root_leads_to_them(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert not [p for p in paths if p.startswith(("/docs", "/favicon"))]
    assert client.get("/").headers["location"] == "/docs"
    assert client.get("/docs/oauth2-redirect").status_code == 404  # FastAPI's, not served


def test_the_favicon_is_an_icon(client: TestClient) -> None:
    answer = client.get("/favicon.ico")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "image/x-icon"
    assert answer.content[:4] == b"\x00\x00\x01\x00"  # an ICO: reserved 0, type 1 (icon)
    assert b"\x89PNG" in answer.content
    assert "max-age" in answer.headers["cache-control"]
