"""What docs/contract.md says of the changes feed's cursor key (issue 47, Lows: it said the key
came from the hash of the ledger's first event): it is derived from the ledger's own random
secret in `ledger_meta`, made at migrate, and nothing derived from the first event opens it."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from ledger.cursor import cursor_key, position_of
from ledger.errors import InvalidCursorError
from ledger.persistence.schema import REQUEST_KEY, ledger_meta
from ledger.persistence.sql_store import SqlStore
from tests.plugins.api import Tokens, bearer, new_job

CONTRACT = Path(__file__).resolve().parents[2] / "docs" / "contract.md"


def test_the_cursor_key_is_derived_from_the_ledgers_own_secret_as_the_contract_says(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    job_id = new_job(client, tokens.acme)
    page = client.get("/v1/jobs", headers=bearer(tokens.acme)).json()
    cursor = page["next_cursor"]
    with store.engine.connect() as conn:
        secret = conn.execute(
            select(ledger_meta.c.value).where(ledger_meta.c.key == REQUEST_KEY)
        ).scalar_one()
    assert len(bytes.fromhex(secret)) == 32
    position = position_of(cursor, cursor_key(bytes.fromhex(secret)))
    assert position == store.last_position()  # the page's last (only) change
    first_hash = store.read_stream(f"job-{job_id}")[0].hash
    for guess in (bytes.fromhex(first_hash), first_hash.encode()):
        with pytest.raises(InvalidCursorError):
            position_of(cursor, cursor_key(guess))
        with pytest.raises(InvalidCursorError):
            position_of(cursor, hmac.new(guess, b"cursor", hashlib.sha256).digest())
    said = " ".join(CONTRACT.read_text().split())
    assert "first event, which every API process" not in said
    assert "`ledger_meta`" in said and "made once by `outcomes migrate`" in said
