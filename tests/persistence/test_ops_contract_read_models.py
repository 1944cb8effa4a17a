"""The operations contract: the read models as stored (`Reads.read_model_rows`, which
`audit verify` compares with a fold of the events) and `Store.snapshot`. Runs on every store
(memory, SQLite, Postgres) through `any_store`, the snapshot on SQLite and Postgres."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import pytest

from ledger.events import BrakePulled, TokenCreated, TokenRevoked, job_id_of
from ledger.persistence.appends import NO_STREAM
from ledger.persistence.base import Store
from ledger.persistence.sql_store import SqlStore
from ledger.read_models import BRAKES, JOBS, TOKENS
from tests.factories import accepted, fresh_job_stream, new, started


def a_job(store: Store) -> str:
    stream = fresh_job_stream()
    store.append(stream, [accepted()], NO_STREAM)
    return job_id_of(stream)


def test_rows_are_every_stored_column_as_the_fold_makes_them(any_store: Store) -> None:
    job_id = a_job(any_store)
    any_store.append(f"job-{job_id}", [started()], 1)
    brake_id, token_id = str(uuid.uuid4()), str(uuid.uuid4())
    pulled = BrakePulled(brake_id=brake_id, scope="global", reason="incident", operator="olga")
    any_store.append(f"brake-{brake_id}", [new(pulled)], NO_STREAM)
    created = TokenCreated(
        token_id=token_id,
        account="acme",
        role="agent",
        tools=None,
        token_hash=hashlib.sha256(token_id.encode()).hexdigest(),
    )
    any_store.append(f"token-{token_id}", [new(created), new(TokenRevoked(token_id=token_id))])
    with any_store.reading() as reads:
        job, brake, token = reads.job(job_id), reads.brake(brake_id), reads.token(token_id)
        assert job is not None and brake is not None and token is not None
        assert reads.read_model_rows("jobs", None, 10) == [JOBS.row(job_id, job)]
        assert reads.read_model_rows("brakes", None, 10) == [BRAKES.row(brake_id, brake)]
        assert reads.read_model_rows("tokens", None, 10) == [TOKENS.row(token_id, token)]
    stored = JOBS.row(job_id, job)
    assert stored["status"] == "running" and stored["created_at"].tzinfo is not None


def test_rows_page_by_key(any_store: Store) -> None:
    ids = sorted(a_job(any_store) for _ in range(5))
    seen: list[str] = []
    after: str | None = None
    with any_store.reading() as reads:
        while page := reads.read_model_rows("jobs", after, 2):
            assert len(page) <= 2
            seen.extend(row["job_id"] for row in page)
            after = page[-1]["job_id"]
        assert reads.read_model_rows("brakes", None, 10) == []
    assert seen == ids


def test_only_read_models_have_rows(any_store: Store) -> None:
    with any_store.reading() as reads, pytest.raises(ValueError, match="leases"):
        reads.read_model_rows("leases", None, 10)


def test_a_snapshot_keeps_the_moment_of_its_first_read(store: SqlStore) -> None:
    first = a_job(store)
    with store.snapshot() as reads:
        before = reads.last_position()
        later = a_job(store)  # commits while the snapshot is open
        assert reads.last_position() == before
        keys: list[Any] = [r["job_id"] for r in reads.read_model_rows("jobs", None, 10)]
        assert keys == [first]
    with store.snapshot() as reads:
        assert reads.last_position() > before
        assert {r["job_id"] for r in reads.read_model_rows("jobs", None, 10)} == {first, later}
