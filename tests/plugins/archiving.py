"""Ledgers with tiny partitions (OUTCOMES_PARTITION_SIZE=10), so that archives of a few dozen
events run in a second, on SQLite and Postgres (migrated fresh: a partition size is the
ledger's own, fixed at its first migration). Helpers to fill them with ended jobs."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from ledger.clock import now
from ledger.events import job_stream
from ledger.persistence import migrate
from ledger.persistence.base import Store
from ledger.persistence.engine import make_engine
from tests.databases import (
    APP_ROLE,
    create_database,
    drop_database,
    pg_url,
    require_postgres,
    unique_name,
)
from tests.factories import accepted, new, started, succeeded

TINY = 10  # positions per partition
JOBS_WINDOW_HOURS = 1  # Postgres: each partition of `jobs` holds the ids of one hour (0020)
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def tiny_url(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """A fresh ledger whose partitions hold TINY positions each (Postgres: migrated by its
    owner, with the application role's grants)."""
    monkeypatch.setenv("OUTCOMES_PARTITION_SIZE", str(TINY))
    monkeypatch.setenv("OUTCOMES_JOBS_PARTITION_HOURS", str(JOBS_WINDOW_HOURS))
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'ledger.db'}"
        engine = make_engine(url)
        migrate.upgrade(engine)
        engine.dispose()
        yield url
        return
    require_postgres()
    name = unique_name("outcomes_tiny")
    create_database(name)
    engine = make_engine(pg_url(name))
    migrate.upgrade(engine)
    migrate.grant(engine, APP_ROLE)
    engine.dispose()
    try:
        yield pg_url(name)
    finally:
        drop_database(name)


def ended_jobs(
    store: Store, count: int, account: str = "acme", ids: Iterator[str] | None = None
) -> list[str]:
    """`count` jobs accepted and succeeded, every third one started between (two or three
    events: some range boundary falls between two jobs), the partitions kept ahead. Their ids
    are random (v4) unless `ids` gives them."""
    made = []
    for n in range(count):
        job_id = next(ids) if ids is not None else str(uuid.uuid4())
        middle = [started()] if n % 3 == 2 else []  # 7 events a 3 jobs: boundaries move
        store.append(job_stream(job_id), [accepted(account=account), *middle, succeeded()], 0)
        store.make_partitions(2)
        made.append(job_id)
    return made


def open_job(store: Store, account: str = "acme", job_id: str | None = None) -> str:
    job_id = job_id or str(uuid.uuid4())
    store.append(job_stream(job_id), [accepted(account=account)], 0)
    store.make_partitions(2)
    return job_id


def token_events(store: Store, count: int) -> None:
    """Events of streams an archive keeps (tokens): created, one of them revoked."""
    from ledger.events import TokenCreated, TokenRevoked

    for i in range(count):
        created = TokenCreated(
            token_id=f"t{i}", account="acme", role="agent", token_hash=f"{i:064d}", tools=None
        )
        store.append(f"token-t{i}", [new(created)], 0)
    store.append("token-t0", [new(TokenRevoked(token_id="t0"))], 1)
    store.make_partitions(2)


def soon() -> datetime:
    return now() + timedelta(seconds=5)
