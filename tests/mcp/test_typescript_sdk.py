"""A client nobody here wrote: the official MCP TypeScript SDK (`@modelcontextprotocol/sdk`, the
one the MCP Inspector and most desktop clients use; `tests/mcp/js/`), over stdio (`outcomes mcp`)
and streamable HTTP (`/mcp` of a real `outcomes serve`). The SDK checks every structured answer
against the tool's declared output schema, errors included, and refuses one that does not
match: each answer below must be accepted by it and carry its typed code.

Needs Node and `npm ci` in tests/mcp/js (`.ci/run` does it); without them the test skips,
except with CI=true, where it fails."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cancelling import ToCancel, jobs_to_cancel
from tests.databases import IN_CI
from tests.mcp.serving import Served, served

pytestmark = pytest.mark.timeout(300)

JS = Path(__file__).parent / "js"
SDK = JS / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json"


def node() -> str:
    found = shutil.which("node")
    missing = None if found else "node is not installed"
    if found and not SDK.exists():
        missing = f"the TypeScript SDK is not installed: run `npm ci` in {JS}"
    if missing is not None:
        if IN_CI:
            pytest.fail(missing)
        pytest.skip(missing)
    assert found is not None
    return found


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    node()  # before serving anything
    with served(tmp_path_factory.mktemp("mcp-ts")) as running:
        yield running


@pytest.fixture(scope="module")
def to_cancel(ledger: Served) -> ToCancel:
    return jobs_to_cancel(ledger.env["OUTCOMES_DATABASE_URL"])


def cancel_calls(jobs: ToCancel) -> list[dict[str, Any]]:
    cancel, queued = "outcome_cancel", jobs.queued[0]
    return [
        # Over the second transport the job is cancelled already: the same answer again.
        {"name": "cancelled", "tool": cancel, "arguments": {"job_id": queued, "reason": "done"}},
        {"name": "not_cancellable", "tool": cancel, "arguments": {"job_id": jobs.running}},
        {"name": "cancel_unknown", "tool": cancel, "arguments": {"job_id": str(uuid.uuid4())}},
    ]


def calls() -> list[dict[str, Any]]:
    key = f"ts-{uuid.uuid4()}"
    read = "tracker__read_issue"
    return [
        {"name": "success", "tool": read, "arguments": {"issue_ref": "T-1", "_wait_s": 30}},
        {
            "name": "failure",
            "tool": read,
            "arguments": {"issue_ref": "T-1", "connector": "disabled", "_wait_s": 30},
        },
        {"name": "refusal", "tool": read, "arguments": {"_wait_s": 30}},
        {"name": "unknown_job", "tool": "outcome_get", "arguments": {"job_id": str(uuid.uuid4())}},
        {"name": "bad_cursor", "tool": "outcome_list", "arguments": {"after": "1"}},
        {
            "name": "first_use",
            "tool": read,
            "arguments": {"issue_ref": "T-1", "_idempotency_key": key},
        },
        {
            "name": "reused_key",
            "tool": read,
            "arguments": {"issue_ref": "T-2", "_idempotency_key": key},
        },
        {"name": "wait_too_long", "tool": read, "arguments": {"issue_ref": "T-1", "_wait_s": 61}},
        {
            "name": "get_wait_too_long",
            "tool": "outcome_get",
            "arguments": {"job_id": "x", "wait_s": 61},
        },
        {
            "name": "budgeted",
            "tool": "budget__listing",
            "arguments": {"items": 1000, "_budget_bytes": 2048, "_wait_s": 30},
        },
        {
            "name": "budget_over_the_tool",
            "tool": "budget__small_cap",
            "arguments": {"items": 1, "_budget_bytes": 4096, "_wait_s": 30},
        },
    ]


def run_sdk(ledger: Served, transport: str, extra: list[dict[str, Any]]) -> dict[str, Any]:
    if transport == "stdio":
        argv = ledger.mcp_argv()
        config: dict[str, Any] = {
            "transport": "stdio",
            "command": argv[0],
            "args": argv[1:],
            "env": ledger.env | {"OUTCOMES_TOKEN": ledger.agent},
            "cwd": str(ledger.home),
        }
    else:
        config = {"transport": "http", "url": f"{ledger.base_url}/mcp", "token": ledger.agent}
    config["calls"] = calls() + extra
    return run_script("check.mjs", config, timeout_s=240)


def run_script(script: str, config: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Run one of tests/mcp/js's scripts on `config`; the JSON document it prints last."""
    done = subprocess.run(
        [node(), str(JS / script), json.dumps(config)],
        cwd=JS,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return report


@pytest.fixture(scope="module", params=["stdio", "http"])
def report(request: pytest.FixtureRequest, ledger: Served, to_cancel: ToCancel) -> dict[str, Any]:
    return run_sdk(ledger, str(request.param), cancel_calls(to_cancel))


def answer(report: dict[str, Any], name: str) -> dict[str, Any]:
    call: dict[str, Any] = report["calls"][name]
    assert call["accepted"], f"the SDK refused the {name} answer: {call.get('error')}"
    return call


def test_tools_list_declares_options_and_secrets(report: dict[str, Any]) -> None:
    tools = report["tools"]
    assert {"tracker__read_issue", "outcome_get", "outcome_list", "vault__login"} <= set(tools)
    read = tools["tracker__read_issue"]["inputSchema"]["properties"]
    assert read["_wait_s"]["maximum"] == 60
    assert read["_budget_bytes"]["maximum"] == 64 * 1024
    password = tools["vault__login"]["inputSchema"]["properties"]["password"]
    assert (password["format"], password["writeOnly"]) == ("password", True)
    for name in ("tracker__read_issue", "outcome_get", "outcome_list", "outcome_cancel"):
        assert tools[name]["outputSchema"]["type"] == "object"


def test_a_success_a_failure_and_a_refusal_are_accepted_with_their_codes(
    report: dict[str, Any],
) -> None:
    success = answer(report, "success")
    assert not success["isError"]
    assert success["structuredContent"]["status"] == "succeeded"
    assert success["structuredContent"]["budget"] is None  # a small answer comes whole
    failure = answer(report, "failure")
    assert failure["isError"] and failure["structuredContent"]["status"] == "failed"
    assert failure["structuredContent"]["error"]["code"] == "CAPABILITY_UNAVAILABLE"
    refusal = answer(report, "refusal")
    assert refusal["isError"] and refusal["structuredContent"]["status"] == "refused"
    assert refusal["structuredContent"]["error"]["code"] == "INPUT_MISSING"
    assert "issue_ref" in refusal["structuredContent"]["error"]["fix"]


@pytest.mark.parametrize(
    ("name", "code", "fix"),
    [
        ("unknown_job", "REFERENCE_UNRESOLVED", "job_id"),
        ("bad_cursor", "INPUT_INVALID", "arguments"),
        ("reused_key", "INPUT_INVALID", "arguments"),
        ("wait_too_long", "INPUT_INVALID", "_wait_s"),
        ("get_wait_too_long", "INPUT_INVALID", "schema"),
    ],
)
def test_answers_that_record_no_job_are_accepted_with_their_code_and_fix(
    report: dict[str, Any], name: str, code: str, fix: str
) -> None:
    call = answer(report, name)
    assert call["isError"]
    assert set(call["structuredContent"]) == {"error"}  # no job: the typed error alone
    error = call["structuredContent"]["error"]
    assert error["code"] == code and fix in error["fix"]
    assert code in call["text"] and error["fix"] in call["text"]


def test_the_first_use_of_a_key_is_a_job(report: dict[str, Any]) -> None:
    assert answer(report, "first_use")["structuredContent"]["status"] == "succeeded"


def test_a_budgeted_answer_says_so_and_a_budget_over_the_tool_is_refused(
    report: dict[str, Any],
) -> None:
    budgeted = answer(report, "budgeted")
    envelope = budgeted["structuredContent"]
    assert not budgeted["isError"] and envelope["status"] == "succeeded"
    assert envelope["next_action"] == "use_partial_and_narrow"
    assert len(json.dumps(envelope["result"], separators=(",", ":"))) <= 2048
    note = envelope["budget"]
    assert note["budget_bytes"] == 2048 and note["omitted_items"] > 0
    assert envelope["result"]["total"] == 1000  # the small values are kept whole
    assert "narrow" in budgeted["text"]
    over = answer(report, "budget_over_the_tool")
    assert over["isError"] and over["structuredContent"]["status"] == "refused"
    assert over["structuredContent"]["error"]["code"] == "INPUT_INVALID"
    assert "1024" in over["structuredContent"]["error"]["fix"]


def test_a_cancel_and_its_refusals_are_accepted_with_their_codes(report: dict[str, Any]) -> None:
    cancelled = answer(report, "cancelled")
    assert not cancelled["isError"]
    assert (
        cancelled["structuredContent"]["status"],
        cancelled["structuredContent"]["next_action"],
    ) == (
        "declined",
        "accept",
    )
    refused = answer(report, "not_cancellable")
    assert refused["isError"] and set(refused["structuredContent"]) == {"error", "job"}
    assert refused["structuredContent"]["error"]["code"] == "NOT_CANCELLABLE"
    assert refused["structuredContent"]["job"]["status"] == "running"
    unknown = answer(report, "cancel_unknown")
    assert unknown["isError"] and set(unknown["structuredContent"]) == {"error"}
    assert unknown["structuredContent"]["error"]["code"] == "REFERENCE_UNRESOLVED"
