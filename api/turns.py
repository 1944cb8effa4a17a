"""Turns (docs/turns.md): `GET /v1/turns/{turn_id}`, what the calls an agent made under one
`Outcomes-Turn` did, told whole; `DELETE /v1/turns/{turn_id}/halt` releases the brake a
halting turn pulled on itself (`Outcomes-Turn-Halt: on-failure`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from api.auth import Principal, check_role
from api.openapi import problems
from api.problems import invalid_input
from api.state import state_of
from ledger.access import ACCOUNT_PATTERN, ALL_ACCOUNTS, may_see
from ledger.errors import TurnNotFoundError
from ledger.services import turns
from ledger.token_view import TokenView
from ledger.turns import TurnReport

router = APIRouter(tags=["turns"])

TurnId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$",
        description="The turn id the agent sent as Outcomes-Turn",
    ),
]
Account = Annotated[
    str | None,
    Query(
        max_length=100,
        pattern=ACCOUNT_PATTERN.replace("\\A", "^").replace("\\Z", "$"),
        description="Whose turn: required of a token of '*'",
    ),
]


class HaltReleased(BaseModel):
    turn_id: str
    released: list[str]


def _account(caller: TokenView, account: str | None) -> str:
    """The account whose turn is read: the token's own, or the one a `*` token names."""
    if caller.account != ALL_ACCOUNTS:
        if account is not None and account != caller.account:
            raise TurnNotFoundError("")
        return caller.account
    if account is None:
        raise invalid_input(
            "A token of every account must name the turn's account.",
            fix="add ?account=<the account>",
        )
    return account


@router.get(
    "/v1/turns/{turn_id}",
    response_model=TurnReport,
    summary="What a whole turn of calls did: each call, counts, what already happened, the "
    "first failure, one sentence",
    responses=problems(401, 404, 422, 503),
)
async def read_turn(
    request: Request, turn_id: TurnId, caller: Principal, account: Account = None
) -> Response:
    whose = _account(caller, account)
    found = await run_in_threadpool(turns.report, state_of(request).ledger, whose, turn_id)
    return Response(found.model_dump_json(), media_type="application/json")


@router.delete(
    "/v1/turns/{turn_id}/halt",
    response_model=HaltReleased,
    summary="Release a halting turn's brake (agents of its account, operators)",
    responses=problems(401, 403, 404, 422, 503),
)
async def release_turn_halt(
    request: Request, turn_id: TurnId, caller: Principal, account: Account = None
) -> Response:
    check_role(caller, "agent", "operator")
    whose = _account(caller, account)
    if not may_see(caller.account, whose):
        raise TurnNotFoundError(turn_id)
    ledger = state_of(request).ledger
    await run_in_threadpool(turns.report, ledger, whose, turn_id)  # 404 for an unknown turn
    by = f"{caller.role} token {caller.token_id}"
    released = await run_in_threadpool(
        turns.release_halt, ledger, whose, turn_id, by, "released by the turn's caller"
    )
    body = HaltReleased(turn_id=turn_id, released=[b.brake_id for b in released])
    return Response(body.model_dump_json(), media_type="application/json")
