"""People in the loop over MCP (docs/approvals.md, docs/turns.md): `outcome_turn(turn_id)`,
what a whole turn did, as `GET /v1/turns/{id}`; `outcome_preflight(tool, args)`, a dry run of a
call (what it would decide now, nothing recorded), as `POST /v1/jobs` with `dry_run`; and the
turn a call belongs to: `_meta["outcomes/turn"]`, else the MCP session's id."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
import mcp_types as types
from pydantic import BaseModel, Field

from ledger.codes import Code
from ledger.decisions import JobRequest, check_turn
from ledger.error_info import ErrorInfo, sentence
from ledger.errors import InvalidEventError, NotAnAgentError, TurnNotFoundError
from ledger.runtime.ledger import Ledger
from ledger.services import catalog, turns
from ledger.services.preflight import Preflight, preflight
from ledger.token_view import TokenView
from ledger.turns import TurnReport
from mcp_server.answers import error_result, or_error_only
from mcp_server.names import OUTCOME_PREFLIGHT, OUTCOME_TURN

TURN_META = "outcomes/turn"
TURN_HALT_META = "outcomes/turn-halt"


class TurnArgs(BaseModel):
    turn_id: str = Field(
        description="The turn: the `_meta` key `outcomes/turn` your calls sent, or this MCP "
        "session's id"
    )


class PreflightArgs(BaseModel):
    tool: str = Field(description="The ledger tool's name (dotted, e.g. tracker.read_issue)")
    args: dict[str, Any] = Field(default_factory=dict, description="The call's arguments")


class PreflightAnswer(BaseModel):
    would: str
    error: ErrorInfo | None
    approval: dict[str, str] | None


TURN_TOOL = types.Tool(
    name=OUTCOME_TURN,
    description=(
        "What a whole turn of your calls did: each call's status, counts, whether all "
        "succeeded (never true while one failed or is open), what already happened, the first "
        "failure and one sentence to report."
    ),
    input_schema=TurnArgs.model_json_schema(),
    output_schema=or_error_only(TurnReport.model_json_schema(mode="serialization")),
    annotations=types.ToolAnnotations(read_only_hint=True),
)
PREFLIGHT_TOOL = types.Tool(
    name=OUTCOME_PREFLIGHT,
    description=(
        "A dry run of a call: whether it would be accepted, parked for a person's approval or "
        "refused (and why) if made now. Nothing is recorded and no quota is counted."
    ),
    input_schema=PreflightArgs.model_json_schema(),
    output_schema=or_error_only(PreflightAnswer.model_json_schema(mode="serialization")),
    annotations=types.ToolAnnotations(read_only_hint=True, idempotent_hint=True),
)


def turn_of(meta: Any, session_id: str | None) -> tuple[str | None, bool, ErrorInfo | None]:
    """The call's turn (its `_meta`, else the session), whether it halts on failure, or the
    error of a turn id that cannot be one."""
    meta = meta if isinstance(meta, dict) else {}
    named = meta.get(TURN_META)
    halt = meta.get(TURN_HALT_META) == "on-failure"
    turn = named if isinstance(named, str) else session_id
    if turn is None:
        return None, False, None
    try:
        return check_turn(turn), halt, None
    except InvalidEventError as exc:
        return None, False, _invalid(f"the turn id is refused: {exc}")


async def turn_report(ledger: Ledger, token: TokenView, args: TurnArgs) -> types.CallToolResult:
    try:
        found = await anyio.to_thread.run_sync(turns.report, ledger, token.account, args.turn_id)
    except (TurnNotFoundError, InvalidEventError):
        return error_result(
            ErrorInfo(
                code=Code.REFERENCE_UNRESOLVED,
                dependency="ledger",
                operation="read the turn",
                fix="pass the turn id your calls sent (or this session's id)",
                message=f"No call of this account names the turn {args.turn_id!r}.",
            )
        )
    return types.CallToolResult(
        content=[types.TextContent(text=found.summary)],
        structured_content=found.model_dump(mode="json"),
        is_error=False,
    )


async def preflight_call(
    ledger: Ledger, token: TokenView, args: PreflightArgs, turn: str | None
) -> types.CallToolResult:
    try:
        caller = catalog.submitter(token)
        request = JobRequest(tool=args.tool, args=args.args, turn=turn)
    except NotAnAgentError as exc:
        return error_result(
            ErrorInfo(
                code=Code.ACCESS_DENIED,
                operation="submit a job",
                required_capability="role:agent",
                fix="use an agent token of one account",
                message=sentence(str(exc).capitalize()),
            )
        )
    except InvalidEventError as exc:
        return error_result(_invalid(str(exc)))
    found: Preflight = await anyio.to_thread.run_sync(preflight, ledger, caller, request)
    text = f"{args.tool} would be {found.would.replace('_', ' ')}"
    if found.error is not None:
        text += f": {found.error.code.value}: {sentence(found.error.message)}"
    elif found.approval_reason is not None:
        text += f": {sentence(found.approval_reason)}"
    return types.CallToolResult(
        content=[types.TextContent(text=text + " Nothing was recorded.")],
        structured_content=found.as_json(),
        is_error=False,
    )


def _invalid(message: str) -> ErrorInfo:
    return ErrorInfo(
        code=Code.INPUT_INVALID,
        operation="submit a job",
        fix="correct the arguments",
        message=sentence(message[0].upper() + message[1:]),
    )
