"""Budgeted answers through the API (contract §3, §6), on SQLite and Postgres, the tools run in
this process by the worker's use case: a 10 MB answer comes back within its budget, saying so,
and the ledger grows by about the budget, not by 10 MB; a small answer comes back whole; the
agent's `budget_bytes` lowers the budget (the tool sees it) and may not raise it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from ledger.budget import DEFAULT_MAX_RESULT_BYTES, json_size
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services.execute import Executor
from tests.plugins.api import Tokens, bearer
from tests.tools import ECHO

TEN_MB = {"items": 100_000, "item_bytes": 100}


def run(client: TestClient, store: SqlStore, token: str, body: dict[str, Any]) -> dict[str, Any]:
    """Submit, run the job here as a worker would, and read its envelope."""
    answer = client.post("/v1/jobs", json=body, headers=bearer(token))
    assert answer.status_code == 202, answer.text
    job_id = answer.json()["job_id"]
    Executor(Ledger(store), "budget-worker").execute(job_id)
    envelope: dict[str, Any] = client.get(f"/v1/jobs/{job_id}", headers=bearer(token)).json()
    return envelope


def stored_bytes(store: SqlStore) -> int:
    """What the ledger's events and jobs hold, as stored JSON (on Postgres, TOAST would
    compress the test's repetitive answer and hide its size)."""
    size = "length(CAST({} AS BLOB))" if store.dialect == "sqlite" else "octet_length({}::text)"
    with store.engine.connect() as conn:
        events = conn.execute(text(f"SELECT coalesce(sum({size.format('data')}), 0) FROM events"))
        jobs = conn.execute(text(f"SELECT coalesce(sum({size.format('view')}), 0) FROM jobs"))
        return int(events.scalar_one()) + int(jobs.scalar_one())


def file_bytes(store: SqlStore) -> int:
    """The SQLite files, write-ahead log included (0 on Postgres)."""
    local = store.local_folder()
    return sum(p.stat().st_size for p in local.glob("ledger.db*") if p.is_file()) if local else 0


def test_a_ten_megabyte_answer_comes_back_within_its_budget_and_says_so(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    before, files_before = stored_bytes(store), file_bytes(store)
    envelope = run(client, store, tokens.acme, {"tool": "budget.listing", "args": TEN_MB})
    grown, files_grown = stored_bytes(store) - before, file_bytes(store) - files_before

    assert (envelope["status"], envelope["next_action"]) == ("succeeded", "use_partial_and_narrow")
    result, note = envelope["result"], envelope["budget"]
    assert json_size({"result": result}) <= DEFAULT_MAX_RESULT_BYTES
    assert result["total"] == 100_000 and 0 < len(result["items"]) < 100_000
    assert note["budget_bytes"] == DEFAULT_MAX_RESULT_BYTES
    assert note["answer_bytes"] > 10_000_000
    assert note["omitted_items"] == 100_000 - len(result["items"])
    assert note["omitted"] == [
        {"path": "/result/items", "unit": "items", "kept": len(result["items"]), "total": 100_000}
    ]
    assert "narrow the request" in note["narrow"]
    # Kept twice (the event and the job's read model), beside a few small events: about the
    # budget, not the 10 MB answer (it was 20 MB, the answer twice).
    assert 2 * note["kept_bytes"] < grown < 3 * DEFAULT_MAX_RESULT_BYTES, grown
    assert files_grown < 1024 * 1024, files_grown  # the SQLite files, pages and log included


def test_a_small_answer_comes_back_whole(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    envelope = run(client, store, tokens.acme, {"tool": ECHO, "args": {"text": "é" * 200}})
    assert envelope["result"] == {"text": "é" * 200}
    assert (envelope["budget"], envelope["next_action"]) == (None, "accept")


def test_the_agent_asks_for_less_and_the_tool_sees_it(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    args = {"items": 1000, "item_bytes": 20}
    cut = run(
        client, store, tokens.acme, {"tool": "budget.listing", "args": args, "budget_bytes": 1024}
    )
    assert cut["budget"]["budget_bytes"] == 1024
    assert len(orjson.dumps({"result": cut["result"]})) <= 1024
    assert "raise budget_bytes (up to 65,536 for this tool)" in cut["budget"]["narrow"]
    # A tool that answers a count when the list does not fit its budget (`ctx.list_or_count`).
    counted = run(
        client,
        store,
        tokens.acme,
        {"tool": "budget.listing", "args": args | {"count_when_over": True}, "budget_bytes": 1024},
    )
    assert counted["result"] == {"items_count": 1000, "total": 1000}
    assert (counted["budget"], counted["next_action"]) == (None, "accept")


@pytest.mark.parametrize(("budget", "tool"), [(2048, "budget.small_cap"), (255, ECHO)])
def test_a_budget_outside_the_tools_range_is_a_recorded_refusal(
    client: TestClient, tokens: Tokens, budget: int, tool: str
) -> None:
    args = {"text": "x"} if tool == ECHO else {}  # only the budget is wrong
    body = {"tool": tool, "args": args, "budget_bytes": budget}
    answer = client.post("/v1/jobs", json=body, headers=bearer(tokens.acme))
    assert answer.status_code == 422, answer.text
    problem = answer.json()
    assert problem["job_id"] is not None and problem["error"]["code"] == "INPUT_INVALID"
    assert "budget_bytes" in problem["error"]["fix"]


@pytest.mark.parametrize("budget", ["4096", True, 4096.5])
def test_a_budget_that_is_not_a_whole_number_is_not_a_body(
    client: TestClient, tokens: Tokens, budget: Any
) -> None:
    body = {"tool": ECHO, "args": {"text": "x"}, "budget_bytes": budget}
    answer = client.post("/v1/jobs", json=body, headers=bearer(tokens.acme))
    assert answer.status_code == 422 and answer.json()["job_id"] is None
    assert answer.json()["error"]["code"] == "INPUT_INVALID"


def test_the_same_key_with_another_budget_is_another_body(
    client: TestClient, tokens: Tokens
) -> None:
    body: dict[str, Any] = {"tool": ECHO, "args": {"text": "x"}, "idempotency_key": "budget-k"}
    first = client.post("/v1/jobs", json=body, headers=bearer(tokens.acme))
    again = client.post("/v1/jobs", json=body, headers=bearer(tokens.acme))
    other = client.post("/v1/jobs", json=body | {"budget_bytes": 1024}, headers=bearer(tokens.acme))
    assert (first.status_code, again.status_code, other.status_code) == (202, 202, 422)
    assert first.json()["job_id"] == again.json()["job_id"]
