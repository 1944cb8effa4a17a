"""What a worker records when it took a job and ran nothing: arguments its release reads
differently, secret arguments it cannot open, a tool it does not have, a brake it cannot read
between steps. Each names what is missing and how to mend it; none is a crash."""

from __future__ import annotations

from pydantic import ValidationError

from ledger.codes import Code
from ledger.decisions import describe_fields
from ledger.error_info import ErrorInfo
from ledger.errors import SecretUnavailableError
from ledger.events import Payload, WorkFailed
from ledger.job_view import JobView
from ledger.tools import ToolSpec


def args_rejected(spec: ToolSpec, exc: ValidationError) -> ErrorInfo:
    problems = describe_fields(exc)
    return ErrorInfo(
        code=Code.INPUT_INVALID,
        dependency=spec.name,
        operation="validate the arguments in the worker",
        fix="deploy one release of the tool on the API and every worker, then submit again",
        message=f"The worker's {spec.name!r} does not accept the recorded arguments "
        f"({problems}); nothing ran.",
    )


def secret_unavailable(spec: ToolSpec, exc: SecretUnavailableError) -> ErrorInfo:
    if exc.missing_key is not None:
        return ErrorInfo(
            code=Code.CAPABILITY_UNAVAILABLE,
            dependency="secrets key",
            operation="open the job's secret arguments in the worker",
            required_capability=f"secrets key {exc.missing_key}",
            fix="give every worker the keys the API seals with (OUTCOMES_SECRETS_KEY, "
            "docs/secrets.md), then submit again",
            message=f"The worker could not open {spec.name!r}'s secret arguments ({exc}); "
            "nothing ran.",
        )
    return ErrorInfo(
        code=Code.INPUT_INVALID,
        dependency=spec.name,
        operation="open the job's secret arguments in the worker",
        fix="submit the job again (its recorded secret arguments cannot be opened)",
        message=f"The worker could not open {spec.name!r}'s secret arguments ({exc}); nothing ran.",
    )


def brake_unreadable() -> ErrorInfo:
    return ErrorInfo(
        code=Code.BRAKE_ENGAGED,
        dependency="ledger",
        operation="re-check the brake between steps",
        fix="restore the workers' access to the ledger, then submit again",
        message="The brake could not be checked, so the work stopped to be safe.",
        cause="brake_state_unreadable",
    )


def missing_tool(view: JobView) -> Payload:
    error = ErrorInfo(
        code=Code.CAPABILITY_UNAVAILABLE,
        dependency=view.tool,
        operation="load the tool in the worker",
        fix="add the tool's module to OUTCOMES_TOOLS on every worker",
        message=f"The worker that took this job has no tool {view.tool!r}; nothing ran.",
    )
    return WorkFailed(attempt=view.attempts, error=error)
