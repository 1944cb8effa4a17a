"""Decisions never trust a read-model row the events do not support (SQLite and Postgres).

The brakes and tokens tables are written by the application, so whoever can write them (the
application role, a table owner) could make a brake look released or an agent look like an
operator. The brake check (at submit, at claim, in the batched append function) and
authentication read those answers from events; the tables only say where to look.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import delete, update
from sqlalchemy.exc import DBAPIError

from ledger.codes import Code, Status
from ledger.decisions import Caller, JobRequest
from ledger.errors import NotAuthenticatedError
from ledger.persistence.schema import brakes as brakes_table
from ledger.persistence.schema import tokens as tokens_table
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services import brakes, tokens
from ledger.services.submit import submit
from ledger.services.work import ClaimRequest, ClaimResult, claim_many
from tests.tools import ECHO

AGENT = Caller("acme", "tok-acme")

BRAKE_EDITS: dict[str, Callable[[str], Any]] = {
    "made inactive": lambda b: (
        update(brakes_table).where(brakes_table.c.brake_id == b).values(active=False)
    ),
    "scope changed": lambda b: (
        update(brakes_table).where(brakes_table.c.brake_id == b).values(scope="account:nobody")
    ),
    "row deleted": lambda b: delete(brakes_table).where(brakes_table.c.brake_id == b),
}


def edit(store: SqlStore, statement: Any) -> None:
    with store.engine.begin() as conn:
        assert conn.execute(statement).rowcount == 1


@pytest.mark.parametrize("how", sorted(BRAKE_EDITS))
def test_a_brake_edited_away_in_its_table_still_holds(
    ledger: Ledger, store: SqlStore, how: str
) -> None:
    queued = submit(ledger, AGENT, JobRequest(ECHO, {"text": "before"})).view
    pulled = brakes.pull(ledger, f"tool:{ECHO}", "incident", "olga")
    edit(store, BRAKE_EDITS[how](pulled.brake_id))

    refused = submit(ledger, AGENT, JobRequest(ECHO, {"text": "after"})).view
    assert (refused.status, refused.code) == (Status.REFUSED, Code.BRAKE_ENGAGED)
    (claim,) = claim_many(ledger, [ClaimRequest(queued.job_id, "w-1", 30.0)])
    assert claim.result is ClaimResult.HALTED
    assert [b.brake_id for b in brakes.active(ledger)] == [pulled.brake_id]

    brakes.release(ledger, pulled.brake_id, "fixed", "olga")
    accepted = submit(ledger, AGENT, JobRequest(ECHO, {"text": "released"})).view
    assert accepted.status is Status.QUEUED
    assert brakes.active(ledger) == []


TOKEN_EDITS: dict[str, dict[str, Any]] = {
    "role raised": {"role": "operator"},
    "account widened": {"account": "*"},
    "tools unrestricted": {"tools": None},
    "revocation undone": {"revoked": False, "revoked_at": None},
}


@pytest.mark.parametrize("how", sorted(TOKEN_EDITS))
def test_a_token_edited_in_its_table_authenticates_as_its_events_say(
    ledger: Ledger, store: SqlStore, how: str
) -> None:
    issued = tokens.create(ledger, "acme", "agent", [ECHO], "operator:alice")
    view = issued.view
    if how == "revocation undone":
        view = tokens.revoke(ledger, view.token_id, "operator:alice")
    changes = TOKEN_EDITS[how]
    columns = {k: v for k, v in changes.items() if k in tokens_table.c}
    edited = columns | {"view": view.model_dump(mode="json") | changes}
    statement = update(tokens_table).where(tokens_table.c.token_id == view.token_id)
    if how == "revocation undone" and store.dialect == "postgresql":
        # Postgres refuses the edit itself (0025): the agents' reads and the batched append
        # ask a token's row whether it is revoked, and a trigger holds it to the events.
        with pytest.raises(DBAPIError, match="revoked and stays so"):
            edit(store, statement.values(edited))
    else:
        edit(store, statement.values(edited))

    if how == "revocation undone":
        with pytest.raises(NotAuthenticatedError):
            tokens.authenticate(ledger, issued.token)
        return
    seen = tokens.authenticate(ledger, issued.token)
    assert (seen.role, seen.account, seen.tools) == ("agent", "acme", [ECHO])


def test_a_token_row_pointed_at_another_tokens_stream_proves_nothing(
    ledger: Ledger, store: SqlStore
) -> None:
    """Someone who writes the table gives their own secret's hash to an operator token's row:
    the operator stream's events name another hash, so the secret is refused."""
    operator = tokens.create(ledger, "*", "operator", None, "operator:alice")
    mine = tokens.create(ledger, "acme", "agent", [ECHO], "operator:alice")
    edit(store, delete(tokens_table).where(tokens_table.c.token_id == mine.view.token_id))
    edit(
        store,
        update(tokens_table)
        .where(tokens_table.c.token_id == operator.view.token_id)
        .values(token_hash=mine.view.token_hash),
    )
    with pytest.raises(NotAuthenticatedError):
        tokens.authenticate(ledger, mine.token)
