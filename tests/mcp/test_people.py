"""People in the loop over MCP (in-process, on each backend): a parked call's task says
`input_required` with the approval's reason, then `working` once approved, then `completed`
with the outcome; a client without tasks hears at once that the call awaits a person; calls name
their turn in `_meta` and `outcome_turn` tells the whole turn; `outcome_preflight` records
nothing; tool annotations come from the tools' declarations."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services.approvals import Approver, decide
from ledger.services.execute import Executor
from mcp_server.tasks import EXTENSION
from tests.mcp.test_tasks import NAME_OF, VERSION, rpc
from tests.plugins.api import Tokens
from tests.store_helpers import settled_head
from tests.tools import APPROVED_CHARGE, ECHO, FAILING_CHARGE, LOOKUP

APPROVER = Approver("acme", "approver", "tok-approver")


def call(
    client: TestClient,
    token: str,
    tool: str,
    arguments: dict[str, Any],
    *,
    tasks: bool = True,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    params: dict[str, Any] = {"name": tool.replace(".", "__"), "arguments": arguments}
    if not meta:
        found: dict[str, Any] = rpc(client, token, "tools/call", params, tasks=tasks)["result"]
        return found
    return rpc_with_meta(client, token, params, meta, tasks)


def rpc_with_meta(
    client: TestClient, token: str, params: dict[str, Any], extra: dict[str, Any], tasks: bool
) -> dict[str, Any]:
    """`rpc`'s tools/call with more `_meta` keys (the turn)."""
    extensions = {EXTENSION: {}} if tasks else {}
    meta = {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {"extensions": extensions},
    } | extra
    headers = {
        "Authorization": f"Bearer {token}",
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": "tools/call",
        "Mcp-Name": params[NAME_OF["tools/call"]],
        "Accept": "application/json, text/event-stream",
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {**params, "_meta": meta}}
    answer: dict[str, Any] = client.post("/mcp", headers=headers, json=body).json()["result"]
    return answer


def test_a_parked_task_is_input_required_then_working_then_completed(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    handle = call(client, tokens.acme, APPROVED_CHARGE, {"amount": 9})
    assert (handle["resultType"], handle["status"]) == ("task", "input_required")
    assert "this tool needs a person's approval" in handle["statusMessage"]
    task_id = handle["taskId"]
    got = rpc(client, tokens.acme, "tasks/get", {"taskId": task_id})["result"]
    assert got["status"] == "input_required" and got["inputRequests"] == {}

    decide(Ledger(store), task_id, APPROVER, "approved", "fine")
    got = rpc(client, tokens.acme, "tasks/get", {"taskId": task_id})["result"]
    assert got["status"] == "working" and "inputRequests" not in got
    Executor(Ledger(store), "w-1").execute(task_id)
    got = rpc(client, tokens.acme, "tasks/get", {"taskId": task_id})["result"]
    assert got["status"] == "completed"
    assert got["result"]["structuredContent"]["status"] == "succeeded"
    assert got["result"]["structuredContent"]["approval"]["decision"] == "approved"


def test_without_tasks_a_parked_call_answers_at_once(client: TestClient, tokens: Tokens) -> None:
    answer = call(client, tokens.acme, APPROVED_CHARGE, {"amount": 9}, tasks=False)
    assert answer["isError"] is False
    assert answer["structuredContent"]["status"] == "awaiting_approval"
    assert "awaiting a person's approval" in answer["content"][0]["text"]


def test_a_turn_named_in_meta_and_told_by_outcome_turn(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    meta = {"outcomes/turn": "mcp-turn-1"}
    first = call(client, tokens.acme, ECHO, {"text": "a", "_wait_s": 0}, tasks=False, meta=meta)
    failing = call(
        client, tokens.acme, FAILING_CHARGE, {"amount": 1, "_wait_s": 0}, tasks=False, meta=meta
    )
    for answer in (first, failing):
        Executor(Ledger(store), "w-1").execute(answer["structuredContent"]["job_id"])
    told = call(client, tokens.acme, "outcome_turn", {"turn_id": "mcp-turn-1"}, tasks=False)
    assert told["isError"] is False
    report = told["structuredContent"]
    assert (report["complete"], report["all_succeeded"]) == (True, False)
    assert report["summary"] == told["content"][0]["text"]
    assert report["summary"].startswith("2 calls: 1 succeeded, 1 failed (SOURCE_UNRELIABLE")
    unknown = call(client, tokens.acme, "outcome_turn", {"turn_id": "nope"}, tasks=False)
    assert unknown["isError"] is True
    assert unknown["structuredContent"]["error"]["code"] == "REFERENCE_UNRESOLVED"


def test_preflight_records_nothing(client: TestClient, tokens: Tokens, store: SqlStore) -> None:
    before = settled_head(store)
    arguments = {"tool": APPROVED_CHARGE, "args": {"amount": 3}}
    answer = call(client, tokens.acme, "outcome_preflight", arguments, tasks=False)
    assert answer["isError"] is False
    assert answer["structuredContent"]["would"] == "awaiting_approval"
    arguments = {"tool": ECHO, "args": {}}
    refused = call(client, tokens.acme, "outcome_preflight", arguments, tasks=False)
    assert refused["structuredContent"]["would"] == "refused"
    assert refused["structuredContent"]["error"]["code"] == "INPUT_MISSING"
    assert settled_head(store) == before


def test_annotations_come_from_the_tools(client: TestClient, tokens: Tokens) -> None:
    listed = rpc(client, tokens.acme, "tools/list", {})["result"]["tools"]
    by_name = {tool["name"]: tool for tool in listed}
    assert by_name[LOOKUP.replace(".", "__")]["annotations"]["readOnlyHint"] is True
    assert by_name[LOOKUP.replace(".", "__")]["annotations"]["idempotentHint"] is True
    charge = by_name[APPROVED_CHARGE.replace(".", "__")]["annotations"]
    assert (charge["readOnlyHint"], charge["destructiveHint"]) == (False, True)
    assert {"outcome_turn", "outcome_preflight"} <= set(by_name)
