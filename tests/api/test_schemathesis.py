"""The whole API against its own /openapi.json, with schemathesis: every phase (examples,
coverage, fuzzing, stateful), every check, negative data too, once with each of two accounts'
tokens (an agent's for the jobs routes, a reader's for audit and brakes; one account per run,
so that a job created in a stateful scenario is read back by its own account).
No 5xx, and every answer must conform to the document.

Bounded: a fixed seed, few examples per operation, and one pass of each phase (no time
budget is given, so the engine does not go round again).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from schemathesis import engine
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import events

import examples.seed_tools  # noqa: F401  (the document's example submits tracker.read_issue)
from api.app import create_app
from ledger.decisions import Caller, JobRequest
from ledger.events import job_stream
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services.brakes import pull
from ledger.services.submit import submit
from tests.factories import started, succeeded
from tests.plugins.api import Tokens
from tests.tools import ECHO

MAX_EXAMPLES = 5
READER_PATHS = ("/v1/audit/", "/v1/brakes")


class InstantWorker:
    """Finishes every dispatched job at once, so a long-poll on it never waits out its S."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store

    def dispatch(self, job_id: str, delay_s: float = 0.0) -> None:
        self.store.append(job_stream(job_id), [started(), succeeded(done=True)])


@dataclass
class Findings:
    statuses: dict[int, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    checks_run: set[str] = field(default_factory=set)


def config(seed: int) -> SchemathesisConfig:
    return SchemathesisConfig.from_dict(
        {
            "seed": seed,
            "generation": {"mode": "all", "max-examples": MAX_EXAMPLES},
            "checks": {"enabled": True},
            "operations": [
                {
                    # A schema-valid body is still a decision: the tool may be unknown to this
                    # deployment or its args may break the tool's own schema. contract §6 records
                    # those and answers 422 with the job_id; the document says so.
                    "include-path": "/v1/jobs",
                    "include-method": "POST",
                    "checks": {
                        "positive_data_acceptance": {
                            "expected-statuses": ["2xx", "401", "403", "404", "409", "422", "429"]
                        }
                    },
                },
                {
                    # A schema-valid URL may still be one the SSRF rule refuses (it does not
                    # resolve, or reaches a private range): 422, as the document says.
                    "include-path": "/v1/webhooks",
                    "include-method": "POST",
                    "checks": {
                        "positive_data_acceptance": {
                            "expected-statuses": ["2xx", "401", "403", "422"]
                        }
                    },
                },
            ],
        }
    )


def run(app: FastAPI, agent: str, reader: str, seed: int) -> Findings:
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=config(seed))

    class AccountTokens:
        """The reader's token where only readers may go, the agent's everywhere else."""

        def get(self, case: Any, ctx: Any) -> str:
            return reader if case.operation.path.startswith(READER_PATHS) else agent

        def set(self, case: Any, data: str, ctx: Any) -> None:
            case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}

    schema.auth(refresh_interval=None)(AccountTokens)
    found = Findings()
    for event in engine.from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            _collect(event, found)
        elif isinstance(event, events.NonFatalError):
            found.failures.append(f"error in {event.label}: {event.info.message}")
        elif isinstance(event, events.FatalError):
            found.failures.append(f"fatal: {event.exception!r}")
        elif isinstance(event, events.EngineFinished):
            found.failures += [f"run failure: {failure}" for failure in event.failures]
    return found


def _collect(event: events.ScenarioFinished, found: Findings) -> None:
    for interaction in event.recorder.interactions.values():
        if interaction.response is not None:
            code = interaction.response.status_code
            found.statuses[code] = found.statuses.get(code, 0) + 1
    for checks in event.recorder.checks.values():
        for check in checks:
            found.checks_run.add(check.name)
            if check.failure_info is not None:
                found.failures.append(f"{event.label}: {check.name}: {check.failure_info.failure}")


def seed_ledger(store: SqlStore, worker: InstantWorker) -> None:
    """Something to find: finished and refused jobs in both accounts, and a brake."""
    for account in ("acme", "globex"):
        caller = Caller(account=account, token_id=f"seed-{account}")
        submit(Ledger(store), caller, JobRequest(ECHO, {"text": "seed"}), worker)
        submit(Ledger(store), caller, JobRequest(ECHO, {}), worker)
    pull(Ledger(store), "account:globex", "seeded brake", "ops")


@pytest.mark.timeout(300)
def test_the_api_conforms_to_its_openapi_document(store: SqlStore, tokens: Tokens) -> None:
    worker = InstantWorker(store)
    seed_ledger(store, worker)
    app = create_app(Ledger(store), worker)

    found = run(app, tokens.acme, tokens.acme_auditor, seed=7)
    also = run(app, tokens.globex, tokens.auditor, seed=8)
    found.failures += also.failures
    found.checks_run |= also.checks_run
    for code, count in also.statuses.items():
        found.statuses[code] = found.statuses.get(code, 0) + count

    assert not found.failures, "\n\n".join(found.failures[:10])
    assert sum(found.statuses.values()) > 200, found.statuses
    assert not [code for code in found.statuses if code >= 500], found.statuses
    assert {200, 202, 401, 404, 405, 409, 422} <= set(found.statuses), found.statuses
    assert {
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_schema_conformance",
        "response_headers_conformance",
        "negative_data_rejection",
        "positive_data_acceptance",
        "ignored_auth",
    } <= found.checks_run, found.checks_run
