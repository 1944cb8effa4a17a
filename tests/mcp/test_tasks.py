"""MCP Tasks on the wire (the 2026-07-28 revision, in-process on each backend): a client that
declares the extension gets a task for a call that has not ended within a moment, and only
then; the task is the ledger's job (its id, its state), so tasks/get and tasks/cancel need no
memory of the call. The official requester library drives it end to end in test_tasks_sdk.py.

The app's dispatcher only records messages: no worker runs, so a job stays queued."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from ledger.persistence.sql_store import SqlStore
from mcp_server.tasks import EXTENSION
from tests.factories import get_job, started, succeeded
from tests.plugins.api import Tokens
from tests.store_helpers import settled_head
from tests.tools import ECHO

VERSION = "2026-07-28"
NAME_OF = {"tools/call": "name", "tasks/get": "taskId", "tasks/cancel": "taskId"}
NAME_OF |= {"tasks/update": "taskId"}


def rpc(
    client: TestClient, token: str, method: str, params: dict[str, Any], *, tasks: bool = True
) -> dict[str, Any]:
    extensions = {EXTENSION: {}} if tasks else {}
    meta = {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {"extensions": extensions},
    }
    headers = {
        "Authorization": f"Bearer {token}",
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": method,
        "Accept": "application/json, text/event-stream",
    }
    if (name := params.get(NAME_OF.get(method, ""))) is not None:
        headers["Mcp-Name"] = str(name)
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
    answer: dict[str, Any] = client.post("/mcp", headers=headers, json=body).json()
    return answer


def call_echo(client: TestClient, token: str, *, tasks: bool = True, **extra: Any) -> Any:
    arguments = {"text": "hi", **extra}
    params = {"name": ECHO.replace(".", "__"), "arguments": arguments}
    return rpc(client, token, "tools/call", params, tasks=tasks)["result"]


def test_the_server_says_it_offers_tasks(client: TestClient, tokens: Tokens) -> None:
    found = rpc(client, tokens.acme, "server/discover", {})["result"]
    assert found["capabilities"]["extensions"] == {EXTENSION: {}}


def test_a_call_still_open_is_a_task_its_job_and_cancelling_it_declines_the_job(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    handle = call_echo(client, tokens.acme)
    assert (handle["resultType"], handle["status"], handle["ttlMs"]) == ("task", "working", None)
    job = get_job(store, handle["taskId"])  # the task id is the job's: durable before answered
    assert job is not None and job.status.value == "queued"
    got = rpc(client, tokens.acme, "tasks/get", {"taskId": handle["taskId"]})["result"]
    assert (got["resultType"], got["status"], got["createdAt"]) == (
        "complete",
        "working",
        handle["createdAt"],
    )
    assert "queued" in got["statusMessage"]
    ack = rpc(client, tokens.acme, "tasks/cancel", {"taskId": handle["taskId"]})["result"]
    assert ack["resultType"] == "complete" and set(ack) <= {"resultType", "_meta"}
    got = rpc(client, tokens.acme, "tasks/get", {"taskId": handle["taskId"]})["result"]
    assert got["status"] == "cancelled" and "result" not in got
    job = get_job(store, handle["taskId"])
    assert job is not None and job.terminal and job.cancelled is not None
    again = rpc(client, tokens.acme, "tasks/cancel", {"taskId": handle["taskId"]})
    assert again["result"]["resultType"] == "complete"  # the same ack: nothing changes


def test_a_client_that_does_not_declare_tasks_never_gets_one(
    client: TestClient, tokens: Tokens
) -> None:
    answer = call_echo(client, tokens.acme, tasks=False, _wait_s=1.5)
    assert answer["resultType"] == "complete" and "taskId" not in answer
    assert answer["structuredContent"]["status"] == "queued"  # waited its _wait_s, then told


def test_a_call_that_ends_at_once_answers_its_result_not_a_task(
    client: TestClient, tokens: Tokens
) -> None:
    params = {"name": ECHO.replace(".", "__"), "arguments": {}}  # `text` missing: refused
    answer = rpc(client, tokens.acme, "tools/call", params)["result"]
    assert answer["resultType"] == "complete" and answer["isError"] is True
    assert answer["structuredContent"]["error"]["code"] == "INPUT_MISSING"


def test_a_finished_task_carries_the_calls_answer(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    handle = call_echo(client, tokens.acme)
    with store.transaction() as tx:
        stream = f"job-{handle['taskId']}"
        tx.append(stream, [started()], 1)
        tx.append(stream, [succeeded(echo="hi")], 2)
    got = rpc(client, tokens.acme, "tasks/get", {"taskId": handle["taskId"]})["result"]
    assert got["status"] == "completed"
    answer = got["result"]
    assert answer["isError"] is False
    assert answer["structuredContent"]["status"] == "succeeded"
    assert answer["structuredContent"]["result"] == {"echo": "hi"}
    assert handle["taskId"] in answer["content"][0]["text"]


@pytest.mark.parametrize("method", ["tasks/get", "tasks/cancel", "tasks/update"])
def test_an_unknown_or_foreign_task_is_an_error(
    client: TestClient, tokens: Tokens, method: str
) -> None:
    mine = call_echo(client, tokens.acme)["taskId"]
    for token, task_id in ((tokens.acme, "no-such-task"), (tokens.globex, mine)):
        params: dict[str, Any] = {"taskId": task_id}
        if method == "tasks/update":
            params["inputResponses"] = {}
        error = rpc(client, token, method, params)["error"]
        assert error["code"] == -32602 and task_id in error["message"]


def test_an_update_is_acknowledged_and_changes_nothing(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    task_id = call_echo(client, tokens.acme)["taskId"]
    before = settled_head(store)
    params = {"taskId": task_id, "inputResponses": {"never-asked": {"action": "accept"}}}
    ack = rpc(client, tokens.acme, "tasks/update", params)["result"]
    assert ack["resultType"] == "complete" and settled_head(store) == before


def test_an_auditor_reads_a_task_and_cancels_none(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    task_id = call_echo(client, tokens.acme)["taskId"]
    assert rpc(client, tokens.auditor, "tasks/get", {"taskId": task_id})["result"]["status"]
    error = rpc(client, tokens.auditor, "tasks/cancel", {"taskId": task_id})["error"]
    assert error["code"] == -32600 and "auditor" in error["message"]
    job = get_job(store, task_id)
    assert job is not None and job.status.value == "queued"
