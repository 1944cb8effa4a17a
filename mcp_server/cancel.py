"""`outcome_cancel`: cancel a call that has not started (docs/cancel.md), as
`POST /v1/jobs/{id}/cancel` does. Its answer is the envelope (declined: not an error); a job
already running or ended answers `isError` with NOT_CANCELLABLE and the job's envelope beside
it (`job`); an unknown job, a reason that cannot be recorded or an auditor's token, the typed
error alone. Every shape matches the declared output schema (`answers.cancel_schema`)."""

from __future__ import annotations

import anyio.to_thread
import mcp_types as types
from pydantic import BaseModel, Field

from ledger.codes import Code
from ledger.error_info import ErrorInfo
from ledger.errors import (
    InvalidEventError,
    JobNotFoundError,
    NotCancellableError,
    ToolNotGrantedError,
)
from ledger.runtime.ledger import Ledger
from ledger.services.cancel import CANCEL_ROLES, MAX_REASON_CHARS, Canceller, cancel, refusal
from ledger.token_view import TokenView
from mcp_server.answers import (
    cancel_schema,
    error_result,
    job_not_found,
    job_result,
    refused_result,
)
from mcp_server.names import OUTCOME_CANCEL, OUTCOME_GET


class CancelArgs(BaseModel):
    job_id: str = Field(description="The job id a tool call answered")
    reason: str | None = Field(
        None,
        max_length=MAX_REASON_CHARS,
        description="Why: recorded, and quoted in the job's declined_reason",
    )


CANCEL_TOOL = types.Tool(
    name=OUTCOME_CANCEL,
    description=(
        "Cancel a call that has not started (queued, or waiting for its retry): it ends "
        "declined and nothing runs. A job already running or finished is left as it is "
        f"(NOT_CANCELLABLE, with its envelope): wait for it with {OUTCOME_GET}."
    ),
    input_schema=CancelArgs.model_json_schema(),
    output_schema=cancel_schema(),
    annotations=types.ToolAnnotations(destructive_hint=True, idempotent_hint=True),
)


async def cancel_job(ledger: Ledger, token: TokenView, args: CancelArgs) -> types.CallToolResult:
    if token.role not in CANCEL_ROLES:
        return error_result(_denied())
    by = Canceller.of_token(token)
    try:
        view = await anyio.to_thread.run_sync(cancel, ledger, args.job_id, by, args.reason)
    except NotCancellableError as exc:
        wait = f"wait for its outcome with {OUTCOME_GET} (wait_s up to 60)"
        read = f'{OUTCOME_GET}(job_id="{exc.job_id}")'
        return refused_result(refusal(exc.status, wait, read), exc.envelope)
    except JobNotFoundError:
        return error_result(job_not_found(args.job_id, "cancel the job"))
    except ToolNotGrantedError as exc:
        return error_result(_not_granted(exc))
    except InvalidEventError as exc:
        return error_result(_invalid(str(exc)))
    return job_result(view, 0.0)


def _denied() -> ErrorInfo:
    return ErrorInfo(
        code=Code.ACCESS_DENIED,
        dependency="ledger",
        operation="cancel the job",
        required_capability="role:" + "|".join(CANCEL_ROLES),
        fix="use an agent token of the job's account, or an operator's",
        message="Auditors read the ledger; only agents and operators cancel jobs.",
    )


def _not_granted(exc: ToolNotGrantedError) -> ErrorInfo:
    return ErrorInfo(
        code=Code.ACCESS_DENIED,
        dependency="ledger",
        operation="cancel the job",
        required_capability=f"tool:{exc.tool}",
        fix="cancel it with a token of that tool, or an operator's",
        message=f"{str(exc).capitalize()}.",
    )


def _invalid(message: str) -> ErrorInfo:
    return ErrorInfo(
        code=Code.INPUT_INVALID,
        dependency="ledger",
        operation="cancel the job",
        fix="send a shorter reason, on one line",
        message=message[0].upper() + message[1:] + ".",
    )
