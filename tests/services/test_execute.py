"""Executing a job, on a ledger in memory: claim (brake re-checked), run under the deadline,
record exactly one outcome, dispatch a retry through the dispatcher. Nothing here needs a
broker or a database; the worker adapter only calls `Executor.execute`."""

from __future__ import annotations

import threading

from pydantic import BaseModel

from ledger.codes import Code, OutcomeMissingCause, Status
from ledger.decisions import Caller, JobRequest
from ledger.events import JobAccepted, NewEvent, job_stream
from ledger.job_view import JobView
from ledger.outcomes import Succeeded, ToolFailure
from ledger.persistence.appends import NO_STREAM
from ledger.runtime.ledger import Ledger
from ledger.services import brakes
from ledger.services.execute import Executor
from ledger.services.submit import submit
from ledger.services.work import ClaimResult
from ledger.tools import ToolContext, tool
from tests.factories import Recorder, get_job

AGENT = Caller(account="acme", token_id="tok-acme")
RAN: list[str] = []  # job ids whose tool body ran, in this process


class Note(BaseModel):
    text: str = ""


@tool("exec.ok")
def ok(args: Note, ctx: ToolContext) -> Succeeded:
    RAN.append(ctx.job_id)
    return Succeeded(result={"echo": args.text, "attempt": ctx.attempt})


@tool("exec.flaky", max_attempts=3)
def flaky(args: Note, ctx: ToolContext) -> Succeeded:
    RAN.append(ctx.job_id)
    raise ToolFailure(
        code=Code.SOURCE_UNRELIABLE,
        dependency="index",
        operation="query",
        retryable=True,
        fingerprint=f"generation-{ctx.attempt}",
        message="The index answered with an error.",
    )


@tool("exec.crash")
def crash(args: Note, ctx: ToolContext) -> Succeeded:
    raise RuntimeError("boom with password=hunter2 inside")


@tool("exec.silent", spends=True)
def silent(args: Note, ctx: ToolContext) -> object:
    return {"looks": "like success"}


@tool("exec.slow", timeout_s=0.2)
def slow(args: Note, ctx: ToolContext) -> Succeeded:
    threading.Event().wait(5)  # outlives its deadline
    return Succeeded()


CHECKPOINT_REACHED = threading.Event()
BRAKE_PULLED = threading.Event()


@tool("exec.steps")
def steps(args: Note, ctx: ToolContext) -> Succeeded:
    CHECKPOINT_REACHED.set()
    BRAKE_PULLED.wait(10)
    ctx.checkpoint()  # the brake was pulled between steps: this raises
    RAN.append(ctx.job_id)
    return Succeeded()


class Strict(BaseModel):
    order: str
    warehouse: str  # this (newer) release needs a field older API releases did not send


@tool("exec.ship", spends=True)
def ship(args: Strict, ctx: ToolContext) -> Succeeded:
    RAN.append(ctx.job_id)
    return Succeeded()


def run(ledger: Ledger, tool_name: str, args: dict[str, object] | None = None) -> JobView:
    job = submit(ledger, AGENT, JobRequest(tool_name, args or {})).view
    Executor(ledger, "w-1", Recorder()).execute(job.job_id)
    view = get_job(ledger, job.job_id)
    assert view is not None
    return view


def test_a_success_is_recorded_by_the_worker_and_its_lease_ends(memory_ledger: Ledger) -> None:
    view = run(memory_ledger, "exec.ok", {"text": "hi"})
    assert (view.status, view.result, view.recorded_by, view.attempts) == (
        Status.SUCCEEDED,
        {"echo": "hi", "attempt": 1},
        "worker",
        1,
    )
    assert view.job_id in RAN
    assert memory_ledger.store.state.leases == {}  # type: ignore[attr-defined]


def test_a_retry_is_recorded_and_dispatched_after_its_backoff(memory_ledger: Ledger) -> None:
    job = submit(memory_ledger, AGENT, JobRequest("exec.flaky", {})).view
    recorder = Recorder()
    done = Executor(memory_ledger, "w-1", recorder).execute(job.job_id)
    assert done.event_type == "work.retry_scheduled" and done.retry_in_s is not None
    assert recorder.sent == [job.job_id] and 0 < recorder.delays[0] <= 1.0
    view = get_job(memory_ledger, job.job_id)
    assert view is not None and (view.status, view.next_action) == (Status.RETRYING, "wait")


def test_a_crash_is_tool_crashed_with_its_secret_scrubbed(memory_ledger: Ledger) -> None:
    view = run(memory_ledger, "exec.crash")
    assert (view.status, view.code) == (Status.FAILED, Code.TOOL_CRASHED)
    (failed,) = [
        e for e in memory_ledger.store.read_stream(job_stream(view.job_id)) if e.code is not None
    ]
    assert "RuntimeError" in failed.data["detail"] and "hunter2" not in failed.data["detail"]


def test_a_tool_that_reports_nothing_is_outcome_missing_not_success(memory_ledger: Ledger) -> None:
    view = run(memory_ledger, "exec.silent")
    assert view.error is not None
    assert (view.status, view.error.cause, view.next_action, view.recorded_by) == (
        Status.FAILED,
        OutcomeMissingCause.NO_OUTCOME_RETURNED.value,
        "verify_at_source",
        "worker",
    )


def test_a_tool_past_its_deadline_is_deadline_exceeded(memory_ledger: Ledger) -> None:
    view = run(memory_ledger, "exec.slow")
    assert view.status is Status.RETRYING  # a deadline is retryable; this tool does not spend
    (retry,) = [
        e
        for e in memory_ledger.store.read_stream(job_stream(view.job_id))
        if e.type == "work.retry_scheduled"
    ]
    assert retry.code is Code.DEADLINE_EXCEEDED


def test_a_brake_pulled_before_the_claim_halts_the_job_and_nothing_runs(
    memory_ledger: Ledger,
) -> None:
    job = submit(memory_ledger, AGENT, JobRequest("exec.ok", {})).view
    brake = brakes.pull(memory_ledger, "global", "incident", "olga")
    done = Executor(memory_ledger, "w-1").execute(job.job_id)
    view = get_job(memory_ledger, job.job_id)
    assert done.claim is ClaimResult.HALTED and job.job_id not in RAN
    assert view is not None and view.error is not None
    assert (view.status, view.code, view.error.cause) == (
        Status.REFUSED,
        Code.BRAKE_ENGAGED,
        brake.brake_id,
    )


def test_a_brake_pulled_between_steps_stops_at_the_checkpoint(memory_ledger: Ledger) -> None:
    job = submit(memory_ledger, AGENT, JobRequest("exec.steps", {})).view
    runner = threading.Thread(target=Executor(memory_ledger, "w-1").execute, args=(job.job_id,))
    runner.start()
    assert CHECKPOINT_REACHED.wait(10)
    brakes.pull(memory_ledger, "tool:exec.steps", "stop now", "olga")
    BRAKE_PULLED.set()
    runner.join(10)
    view = get_job(memory_ledger, job.job_id)
    assert view is not None and (view.status, view.code) == (Status.REFUSED, Code.BRAKE_ENGAGED)
    assert job.job_id not in RAN


def test_arguments_this_release_cannot_read_fail_as_input_invalid_and_nothing_runs(
    memory_ledger: Ledger,
) -> None:
    """A rolling deploy: the API that accepted the job did not require `warehouse`; this
    worker's release does. The job must end failed, naming the field, recorded by the worker,
    never left running (the reconciler would then say worker_lost, a lie)."""
    stream = job_stream("6b1f5f3e-0000-4000-8000-000000000001")
    accepted = JobAccepted(account="acme", tool="exec.ship", args={"order": "o-1"}, spends=True)
    memory_ledger.store.append(stream, [NewEvent(payload=accepted, actor="api")], NO_STREAM)
    job_id = stream.removeprefix("job-")
    done = Executor(memory_ledger, "w-1").execute(job_id)
    view = get_job(memory_ledger, job_id)
    assert done.event_type == "work.failed" and job_id not in RAN
    assert view is not None and view.error is not None
    assert (view.status, view.code, view.recorded_by, view.next_action) == (
        Status.FAILED,
        Code.INPUT_INVALID,
        "worker",
        "stop_and_report",
    )
    assert "warehouse" in view.error.message and "o-1" not in view.error.message


def test_a_job_already_closed_or_running_is_skipped(memory_ledger: Ledger) -> None:
    view = run(memory_ledger, "exec.ok")
    assert Executor(memory_ledger, "w-2").execute(view.job_id).claim is ClaimResult.SKIPPED
    unknown = "6b1f5f3e-0000-4000-8000-00000000ffff"
    assert Executor(memory_ledger, "w-2").execute(unknown).claim is ClaimResult.SKIPPED


@tool("exec.owned_code", max_attempts=3)
def owned_code(args: Note, ctx: ToolContext) -> Succeeded:
    raise ToolFailure(
        code=Code.BRAKE_ENGAGED,  # the ledger's own: the constructor refuses it
        dependency="index",
        operation="query",
        retryable=True,
        message="pretending to be the brake",
    )


def test_a_tool_raising_a_ledger_owned_code_is_recorded_tool_crashed(
    memory_ledger: Ledger,
) -> None:
    """What the README says a tool that raises a ledger-owned code gets: failed, TOOL_CRASHED,
    not retried, the detail naming the refusal."""
    view = run(memory_ledger, "exec.owned_code")
    assert (view.status, view.code, view.attempts) == (Status.FAILED, Code.TOOL_CRASHED, 1)
    (failed,) = [
        e for e in memory_ledger.store.read_stream(job_stream(view.job_id)) if e.code is not None
    ]
    assert "a tool may not raise the ledger's own code BRAKE_ENGAGED" in failed.data["detail"]
