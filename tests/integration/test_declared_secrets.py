"""Declared secrets (contract §3), end to end on a real ledger (SQLite and Postgres), the real
API, CLI and console, and a real broker message (the embedded broker's queue folder): a
`SecretStr` argument that a crashing tool echoes and a `ToolFailure` quotes appears nowhere (the
envelope, every role's event pages, `/v1/audit/events`, the export, the console, the logs, the
broker's message, the database's raw file or tables) while the tool received the real value,
and the argument values that are not secrets stay readable wherever the tool quoted them. The
seed's review paths keep their text verbatim: the candidates of an ambiguous reference, the
lookup that failed, the scope that was denied.

The tools run in this process through the worker's own use case (`Executor`)."""

from __future__ import annotations

import base64
import hashlib
import logging
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import inspect, text

import examples.seed_tools  # noqa: F401  (the seed's tracker is one of the submitted tools)
from api.app import create_app
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services.execute import Executor
from ledger.settings import load_settings
from tests.plugins.api import Tokens, bearer
from tests.plugins.cli import Invoke
from workers.app import make_celery
from workers.dispatch import CeleryDispatcher

WORKER = "secrets-host:4343"
VAULT, USER = "acc-tracker", "login bug"  # argument values, not secrets: they stay readable


def canary() -> str:
    """A password with `@`, `;` and a space, and a part no pattern knows."""
    return f"p@ss;word hunter2 {uuid.uuid4().hex[:16]}"


def leaks(secret: str, found: str) -> list[str]:
    return [piece for piece in (secret, *secret.split(" ")) if piece in found]


def raw_database(store: SqlStore) -> str:
    """Everything the database holds, as stored: the SQLite files' bytes (the WAL too), or
    every row of every Postgres table as text."""
    local = store.local_folder()
    if local is not None:
        files = sorted(path for path in local.glob("ledger.db*") if path.is_file())  # not bells
        assert files, local
        return "".join(path.read_bytes().decode("latin-1") for path in files)
    with store.engine.connect() as conn:
        tables = inspect(conn).get_table_names()
        assert "events" in tables
        rows = [conn.execute(text(f'SELECT t::text FROM "{name}" t')).all() for name in tables]
    return "\n".join(str(row) for table in rows for row in table)


def broker_messages(home: Path) -> list[str]:
    """Each message waiting in the embedded broker's queue, with its body decoded."""
    found = []
    for path in sorted((home / "broker" / "queue").glob("*.msg")):
        message = orjson.loads(path.read_bytes())
        body = message["body"]
        if message["properties"].get("body_encoding") == "base64":
            body = base64.b64decode(body).decode()
        found.append(f"{path.read_text()} {body}")
    return found


@pytest.fixture
def embedded_dispatcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[CeleryDispatcher, Path]]:
    """A real Celery dispatcher on the embedded broker in a folder of this test's own."""
    monkeypatch.chdir(tmp_path)
    queue = f"secrets-{uuid.uuid4().hex[:12]}"  # kombu keeps bindings process-wide, by name
    app = make_celery(replace(load_settings(), broker_url=None, queue=queue))
    dispatcher = CeleryDispatcher(app, queue)
    try:
        yield dispatcher, tmp_path / ".outcomes"
    finally:
        dispatcher.close()
        app.close()


def test_a_declared_secret_rests_nowhere_and_what_was_asked_stays_readable(
    store: SqlStore,
    tokens: Tokens,
    outcomes: Invoke,
    embedded_dispatcher: tuple[CeleryDispatcher, Path],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = canary()
    dispatcher, broker_home = embedded_dispatcher
    ledger = Ledger(store)
    proof = tmp_path / "received"
    vault = {"vault": VAULT, "user": USER, "password": secret}
    with TestClient(create_app(ledger, dispatcher)) as client:

        def submit(tool: str, args: dict[str, Any]) -> str:
            answer = client.post(
                "/v1/jobs", json={"tool": tool, "args": args}, headers=bearer(tokens.acme)
            )
            assert answer.status_code == 202, answer.text
            job_id: str = answer.json()["job_id"]
            return job_id

        jobs = {
            "crash": submit("vault.login", vault | {"mode": "crash", "proof": str(proof)}),
            "refuse": submit("vault.login", vault | {"mode": "refuse"}),
            "ok": submit("vault.login", vault | {"mode": "ok"}),
            "ambiguous": submit("tracker.read_issue", {"issue_ref": "checkout"}),
            "lookup": submit("tracker.read_issue", {"issue_ref": "T-404"}),
            "scope": submit("tracker.read_issue", {"issue_ref": "T-1", "connector": "no_scope"}),
        }
        # Before any worker took them; the app's outbox publishes after each answer.
        assert client.app.state.api.outbox.flush(timeout_s=30)  # type: ignore[attr-defined]
        messages = broker_messages(broker_home)
        executor = Executor(ledger, WORKER)
        for job_id in jobs.values():
            executor.execute(job_id)

        # The tool got the real value.
        assert proof.read_text() == hashlib.sha256(secret.encode()).hexdigest()

        envelopes = {
            name: client.get(f"/v1/jobs/{job_id}", headers=bearer(tokens.acme)).json()
            for name, job_id in jobs.items()
        }
        pages: dict[str, str] = {}
        roles = {"agent": tokens.acme, "operator": tokens.operator, "auditor": tokens.auditor}
        for role, token in roles.items():
            paths = [f"/v1/jobs/{j}{tail}" for j in jobs.values() for tail in ("", "/events")]
            paths += ["/v1/jobs?limit=1000"]
            if role != "agent":
                paths += ["/v1/audit/events?limit=1000", "/v1/audit/summary"]
            for path in paths:
                answer = client.get(path, headers=bearer(token))
                assert answer.status_code == 200, (role, path, answer.text)
                pages[f"{role} {path}"] = answer.text
        for role in ("operator", "auditor"):
            signed = client.post("/console/sign-in", data={"token": roles[role]})
            assert signed.status_code in (200, 303), signed.text
            console = ["/console/jobs", "/console/jobs/rows", "/console/audit/export.jsonl"]
            for path in [*console, *(f"/console/jobs/{j}" for j in jobs.values())]:
                answer = client.get(path)
                assert answer.status_code == 200, (role, path)
                pages[f"console {role} {path}"] = answer.text
        staff_events = client.get(
            f"/v1/jobs/{jobs['crash']}/events", headers=bearer(tokens.operator)
        ).json()["events"]
        agent_events = client.get(
            f"/v1/jobs/{jobs['refuse']}/events", headers=bearer(tokens.acme)
        ).json()["events"]
        console_job = client.get(f"/console/jobs/{jobs['refuse']}").text

    commands = {
        " ".join(args): outcomes(*args).output
        for args in (
            *(("jobs", "show", j, "--json") for j in jobs.values()),
            ("jobs", "list", "--json"),
            *(("audit", "events", "--format", f) for f in ("table", "jsonl", "csv")),
            ("audit", "export"),
        )
    }
    assert outcomes("audit", "verify").exit_code == 0  # the chains cover the sealed values

    everywhere = {
        **{f"envelope {name}": orjson.dumps(e).decode() for name, e in envelopes.items()},
        **pages,
        **commands,
        **{f"broker message {n}": m for n, m in enumerate(messages)},
        "logs": caplog.text,
        "database": raw_database(store),
    }
    assert {
        where: found for where, text in everywhere.items() if (found := leaks(secret, text))
    } == {}
    assert len(messages) == len(jobs) and all(any(j in m for j in jobs.values()) for m in messages)
    assert "ol-sealed:v1:" in commands["audit export"]  # the export holds it, sealed

    # What was asked stays readable: the tool's text, the pages' arguments.
    crash, refuse, ok = envelopes["crash"], envelopes["refuse"], envelopes["ok"]
    assert (crash["status"], crash["error"]["code"]) == ("failed", "TOOL_CRASHED")
    (failed,) = [e for e in staff_events if e["type"] == "work.failed"]
    assert failed["data"]["detail"] == (
        f"RuntimeError: login to {VAULT} as {USER} failed: password='[REDACTED]'"
    )
    error = refuse["error"]
    assert error["code"] == "ACCESS_DENIED"
    assert error["message"] == f"The vault {VAULT} refused {USER} with password [REDACTED]."
    assert error["fix"] == f"ask the owner of {VAULT} to let {USER} in (password [REDACTED])"
    assert (error["dependency"], error["operation"]) == (f"vault {VAULT}", f"log in as {USER}")
    assert error["required_capability"] == f"{VAULT}:login"
    assert ok["result"] == {"vault": VAULT, "user": USER, "echo": "[REDACTED]"}
    (decision,) = [e for e in agent_events if e["type"] == "job.accepted"]
    assert decision["data"]["args"] == {
        "vault": VAULT,
        "user": USER,
        "password": "(secret)",
        "mode": "refuse",
    }
    assert decision["data"]["secret_paths"] == ["/password"]
    assert VAULT in console_job and USER in console_job and "(secret)" in console_job

    # The seed's review paths, verbatim (seed 000).
    ambiguous = envelopes["ambiguous"]["error"]
    assert ambiguous["code"] == "REFERENCE_UNRESOLVED"
    assert ambiguous["message"] == "'checkout' matches several issues: T-1, T-7."
    assert ambiguous["fix"] == "choose one of: T-1, T-7"
    lookup = envelopes["lookup"]["error"]
    assert (lookup["code"], lookup["message"]) == (
        "REFERENCE_UNRESOLVED",
        "No issue matches 'T-404'.",
    )
    scope = envelopes["scope"]["error"]
    assert (scope["code"], scope["required_capability"]) == ("ACCESS_DENIED", "tracker.issue:read")
    assert scope["operation"] == "read issue metadata and recent comments"
    assert scope["fix"] == "grant read access or paste an approved export"
