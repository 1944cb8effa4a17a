"""Every error is problem+json, the framework's own included; body limits hold before parsing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from api.limits import (
    MAX_BODY_BYTES,
    MAX_JSON_DEPTH,
    has_integer_beyond_64_bits,
    nests_deeper_than,
)
from tests.factories import ERROR_KEYS
from tests.plugins.api import Tokens, bearer
from tests.tools import ECHO


def assert_problem(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem: dict[str, Any] = response.json()
    assert set(problem) == {"type", "title", "status", "detail", "job_id", "error"}
    assert set(problem["error"]) == ERROR_KEYS
    assert (problem["status"], problem["error"]["code"]) == (status, code)
    assert problem["type"].startswith("urn:outcome-ledger:problem:")
    return problem


def test_unknown_route_is_404_reference_unresolved(client: TestClient, tokens: Tokens) -> None:
    for path in ("/nowhere", "/v1/jobs/a/b/c", "/v2/jobs"):
        assert_problem(client.get(path, headers=bearer(tokens.acme)), 404, "REFERENCE_UNRESOLVED")


@pytest.mark.parametrize(
    "path", ["/v1/jobs/", f"/v1/jobs/{'0' * 8}-0000-0000-0000-{'0' * 12}/events/", "/v1/brakes/"]
)
def test_a_trailing_slash_is_404_never_a_redirect(
    client: TestClient, tokens: Tokens, path: str
) -> None:
    for headers in ({}, bearer(tokens.operator)):
        response = client.get(
            path, headers=headers | {"Host": "evil.example"}, follow_redirects=False
        )
        assert_problem(response, 404, "REFERENCE_UNRESOLVED")
        assert "location" not in response.headers


def test_authentication_comes_before_validation(client: TestClient) -> None:
    job = f"/v1/jobs/{'0' * 8}-0000-0000-0000-{'0' * 12}"
    for headers in ({}, bearer("ol_not-a-real-token")):
        for path in (f"{job}?wait=soon", f"{job}?wait=nan", "/v1/jobs?limit=0"):
            assert_problem(client.get(path, headers=headers), 401, "ACCESS_DENIED")
        for content, media in ((b"{", "application/json"), (b"{}", "text/plain")):
            response = client.post(
                "/v1/jobs", content=content, headers=headers | {"Content-Type": media}
            )
            assert_problem(response, 401, "ACCESS_DENIED")


def test_wrong_method_is_405_with_every_allowed_method(client: TestClient) -> None:
    response = client.delete("/v1/jobs")
    assert_problem(response, 405, "CAPABILITY_UNAVAILABLE")
    assert response.headers["allow"] == "GET, POST"
    response = client.put("/v1/brakes")
    assert_problem(response, 405, "CAPABILITY_UNAVAILABLE")
    assert response.headers["allow"] == "GET"


@pytest.mark.parametrize(
    "content",
    [b"{", b'{"tool": "a", "args": NaN}', b'{"tool": "a",}', b"\xff\xfe", b'{"tool": "a"} {}'],
)
def test_a_body_that_is_not_json_at_all_is_400(
    client: TestClient, tokens: Tokens, content: bytes
) -> None:
    response = client.post(
        "/v1/jobs",
        content=content,
        headers=bearer(tokens.acme) | {"Content-Type": "application/json"},
    )
    problem = assert_problem(response, 400, "INPUT_INVALID")
    assert problem["job_id"] is None and problem["detail"] == "The request body is not valid JSON."
    assert client.get("/v1/jobs", headers=bearer(tokens.acme)).json()["items"] == []


def test_the_document_says_a_body_may_be_answered_400(client: TestClient) -> None:
    submit = client.get("/openapi.json").json()["paths"]["/v1/jobs"]["post"]["responses"]
    assert "not well-formed JSON" in submit["400"]["description"]
    assert "application/problem+json" in submit["400"]["content"]
    assert "Malformed" not in submit["422"]["description"]


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (b"", "INPUT_MISSING"),
        (b"[1, 2]", "INPUT_INVALID"),
        (b'{"tool": 5, "args": {}}', "INPUT_INVALID"),
        (b'{"tool": "apitest.echo", "args": []}', "INPUT_INVALID"),
        (b'{"tool": "apitest.echo", "args": {}, "extra": 1}', "INPUT_INVALID"),
        (b'{"tool": "bad\\u0000tool", "args": {}}', "INPUT_INVALID"),
        (b'{"args": {}}', "INPUT_MISSING"),
        (b'{"tool": "apitest.echo", "args": {"text": "nul \\u0000"}}', "INPUT_INVALID"),
    ],
)
def test_bodies_that_break_the_schema_are_422_problems(
    client: TestClient, tokens: Tokens, content: bytes, code: str
) -> None:
    response = client.post(
        "/v1/jobs",
        content=content,
        headers=bearer(tokens.acme) | {"Content-Type": "application/json"},
    )
    problem = assert_problem(response, 422, code)
    assert problem["job_id"] is None


@pytest.mark.parametrize("media", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_a_body_that_is_not_json_is_415(
    client: TestClient, tokens: Tokens, media: str | None
) -> None:
    body = orjson.dumps({"tool": ECHO, "args": {"text": "x"}})
    headers = bearer(tokens.acme) | ({"Content-Type": media} if media else {})
    response = client.post("/v1/jobs", content=body, headers=headers)
    assert_problem(response, 415, "INPUT_INVALID")
    assert client.get("/v1/jobs", headers=bearer(tokens.acme)).json()["items"] == []
    for json_media in ("application/json; charset=utf-8", "application/merge-patch+json"):
        response = client.post(
            "/v1/jobs", content=body, headers=bearer(tokens.acme) | {"Content-Type": json_media}
        )
        assert response.status_code == 202, response.text


def test_an_integer_beyond_64_bits_is_422_never_a_float(client: TestClient, tokens: Tokens) -> None:
    headers = bearer(tokens.acme) | {"Content-Type": "application/json"}
    key = "big-1"
    # 2**64 and 2**64+1 would parse as one float; 5000 digits exceed int()'s own limit.
    for times in (str(2**64), str(2**64 + 1), str(-(2**63) - 1), "9" * 5000):
        body = f'{{"tool": "{ECHO}", "args": {{"text": "x", "times": {times}}}, '
        body += f'"idempotency_key": "{key}"}}'
        response = client.post("/v1/jobs", content=body.encode(), headers=headers)
        assert "64 bits" in assert_problem(response, 422, "INPUT_INVALID")["detail"]
    largest = {"tool": ECHO, "args": {"text": "x", "times": 2**63 - 1}, "idempotency_key": key}
    assert client.post("/v1/jobs", json=largest, headers=headers).status_code == 202


def test_the_integer_scanner_reads_numbers_not_strings_or_fractions() -> None:
    assert has_integer_beyond_64_bits(b'["\\\\", 9223372036854775808]')
    assert not has_integer_beyond_64_bits(b"[9223372036854775807, -9223372036854775808]")
    assert not has_integer_beyond_64_bits(b'{"99999999999999999999": "99999999999999999999"}')
    assert not has_integer_beyond_64_bits(b"[1.99999999999999999999, 1e-99999999999999999999]")
    assert not has_integer_beyond_64_bits(b"[99999999999999999999e1, 99999999999999999999.5]")


def test_query_validation_errors_are_422_problems(client: TestClient, tokens: Tokens) -> None:
    for query in ("limit=0", "limit=abc", "after=-1", "after=99999999999999999999"):
        assert_problem(
            client.get(f"/v1/jobs?{query}", headers=bearer(tokens.acme)), 422, "INPUT_INVALID"
        )
    for wait in ("61", "-1", "soon", "nan"):
        response = client.get(
            f"/v1/jobs/{'0' * 8}-0000-0000-0000-{'0' * 12}?wait={wait}", headers=bearer(tokens.acme)
        )
        assert_problem(response, 422, "INPUT_INVALID")


def test_too_deep_json_is_refused_before_it_is_parsed(
    client: TestClient, tokens: Tokens, monkeypatch: pytest.MonkeyPatch
) -> None:
    def parser_must_not_run(_body: bytes) -> Any:
        raise AssertionError("the JSON parser saw a body deeper than the limit")

    monkeypatch.setattr(orjson, "loads", parser_must_not_run)  # the one `json_of` calls
    deep = '{"tool": "apitest.echo", "args": {"x": ' + "[" * 40 + "]" * 40 + "}}"
    headers = bearer(tokens.acme) | {"Content-Type": "application/json"}
    response = client.post("/v1/jobs", content=deep.encode(), headers=headers)
    assert_problem(response, 422, "INPUT_INVALID")
    assert "deeper" in response.json()["detail"]


def test_the_depth_scanner_skips_brackets_inside_strings() -> None:
    limit = MAX_JSON_DEPTH
    assert not nests_deeper_than(json.dumps({"a": "[" * 100 + '\\"{'}).encode(), limit)
    assert not nests_deeper_than(json.dumps([[[]]] * 3).encode(), 3)
    assert nests_deeper_than(json.dumps([[[[]]]]).encode(), 3)
    assert nests_deeper_than(b'{"a": "\\\\"' + b"[" * 5, 4)  # an escaped backslash ends no string
    assert not nests_deeper_than(b'"never closed \\" [[[[[[', 2)  # malformed: the parser says so


def test_body_over_the_limit_is_413_with_content_length(client: TestClient, tokens: Tokens) -> None:
    body = json.dumps({"tool": ECHO, "args": {"text": "x" * MAX_BODY_BYTES}}).encode()
    response = client.post("/v1/jobs", content=body, headers=bearer(tokens.acme))
    assert_problem(response, 413, "INPUT_INVALID")


def test_streamed_body_over_the_limit_is_cut_off_413(client: TestClient, tokens: Tokens) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer
        for _ in range(64):
            yield b" " * 16384

    headers = bearer(tokens.acme) | {"Content-Type": "application/json"}
    response = client.post("/v1/jobs", content=chunks(), headers=headers)
    assert_problem(response, 413, "INPUT_INVALID")
    assert "content-length" not in {k.lower() for k in response.request.headers}


def test_detail_and_error_message_say_the_same(client: TestClient, tokens: Tokens) -> None:
    """One sentence, said once: `detail` is `error.message` on every problem."""
    unknown = f"/v1/jobs/{'0' * 8}-0000-0000-0000-{'0' * 12}"
    answers = {
        403: client.get("/v1/brakes", headers=bearer(tokens.acme)),  # an agent's token
        404: client.get(unknown, headers=bearer(tokens.acme)),
        401: client.get("/v1/jobs"),
        405: client.delete("/v1/jobs"),
    }
    for status, response in answers.items():
        problem = response.json()
        assert problem["status"] == status
        assert problem["detail"] == problem["error"]["message"], problem
    assert answers[403].json()["detail"] == "This endpoint is for operator or auditor tokens."
    assert answers[404].json()["detail"] == "No job with this id is visible to this token."
    metrics = client.get("/metrics", headers=bearer(tokens.acme_auditor)).json()
    assert metrics["detail"] == metrics["error"]["message"]
    assert "every account" in metrics["detail"]
