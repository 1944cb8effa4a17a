"""MCP Tasks with a client nobody here wrote: the official requester library
(`@modelcontextprotocol/ext-tasks` on the official v2 client; tests/mcp/js/tasks.mjs) against
real processes on embedded defaults — `outcomes serve --api-only` and an `outcomes worker` of
its own, so the API can be restarted while the worker goes on.

- A slow tool's call answers a task; the serve process is stopped, the tool finishes, another
  serve process starts, and the task resumed there (from the reference the library serialized)
  settles with the tool's result: nothing of the task lived in the first server's memory.
- With no worker running, a call answers a queued task; tasks/cancel declines its job, which
  never starts, even once a worker comes back.

Needs Node and `npm ci` in tests/mcp/js, like test_typescript_sdk.py (CI=true: fails)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger.job_view import JobView
from ledger.runtime.ledger import open_ledger
from ledger.services import jobs
from ledger.services.tokens import create as create_token
from tests.mcp.serving import Served, prepare
from tests.mcp.test_typescript_sdk import JS, node, run_script
from tests.plugins.deployments import wait_until
from tests.serving import outcomes_argv, serving

pytestmark = pytest.mark.timeout(300)

GATED = "matrix__gated_read"  # waits for its gate file, then succeeds


def run_js(served: Served, base: str, **config: Any) -> dict[str, Any]:
    config |= {"url": f"{base}/mcp", "token": served.agent}
    return run_script("tasks.mjs", config, timeout_s=120)


@contextmanager
def worker(served: Served, name: str) -> Iterator[None]:
    """`outcomes worker` in the ledger's folder (the embedded broker is there), stopped by pid."""
    log = served.home / f"worker-{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            outcomes_argv("worker", "--pool", "threads", "-c", "2"),
            cwd=served.home,
            env=served.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield
    finally:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def job(served: Served, job_id: str) -> JobView:
    with open_ledger(served.env["OUTCOMES_DATABASE_URL"]) as ledger:
        return jobs.get(ledger, job_id)


def event_types(served: Served, job_id: str) -> list[str]:
    with open_ledger(served.env["OUTCOMES_DATABASE_URL"]) as ledger:
        return [event["type"] for event in jobs.events(ledger, job_id)]


@pytest.fixture
def served(tmp_path: Path) -> Served:
    node()  # before anything is started
    return prepare(tmp_path)


def test_a_task_outlives_the_server_that_created_it(served: Served) -> None:
    gate = served.home / f"gate-{uuid.uuid4().hex}"
    with worker(served, "a"):
        with serving(served.home, served.env, api_only=True) as first:
            started = run_js(served, first, step="start", tool=GATED, arguments={"gate": str(gate)})
        assert started["kind"] == "task", started
        task_id = started["taskId"]
        assert started["reference"]["taskId"] == task_id
        # No API runs now: the worker finishes the job and records its outcome.
        gate.touch()
        wait_until(lambda: job(served, task_id).terminal, 60, "the task's job to end")
        with serving(served.home, served.env, api_only=True) as second:
            resumed = run_js(served, second, step="resume", reference=started["reference"])
    assert resumed["outcome"]["status"] == "completed", resumed
    answer = resumed["outcome"]["result"]
    assert answer["isError"] is False
    assert answer["structuredContent"]["job_id"] == task_id
    assert answer["structuredContent"]["status"] == "succeeded"
    assert answer["structuredContent"]["result"] == {"read": True}


def test_a_parked_call_is_input_required_then_settles_once_approved(served: Served) -> None:
    """docs/approvals.md over MCP: the official library sees the parked call's task as
    `input_required` with the approval's reason, and, once a person approved it and a worker
    ran it, resumes it to the call's outcome."""
    config = {"step": "watch", "tool": "itest__charge_approved", "arguments": {"amount": 5}}
    with worker(served, "p"), serving(served.home, served.env, api_only=True) as base:
        config |= {"url": f"{base}/mcp", "token": served.agent}
        watching = subprocess.Popen(
            [node(), str(JS / "tasks.mjs"), json.dumps(config)],
            cwd=JS,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert watching.stderr is not None
            line = watching.stderr.readline()  # blocks until the client saw its task
            assert line.startswith("parked "), line + watching.stderr.read()
            task_id = line.split()[1]
            with open_ledger(served.env["OUTCOMES_DATABASE_URL"]) as ledger:
                approver = create_token(ledger, "acme", "approver", None, actor="tests").token
            # Through the served API, whose outbox publishes the approved call to the worker.
            approved = httpx.post(
                f"{base}/v1/jobs/{task_id}/approve",
                json={"reason": "checked"},
                headers={"Authorization": f"Bearer {approver}"},
                timeout=30,
            )
            assert approved.status_code == 200, approved.text
            wait_until(lambda: job(served, task_id).terminal, 60, "the approved job to end")
            try:
                out, err = watching.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                watching.kill()
                out, err = watching.communicate()
                unsettled = f"the client did not settle: {job(served, task_id)} {err}"
                raise AssertionError(unsettled) from None
        finally:
            if watching.poll() is None:
                watching.kill()
    assert watching.returncode == 0, err[-3000:]
    report = json.loads(out.splitlines()[-1])
    assert report["kind"] == "task" and report["taskId"] == task_id
    assert report["first"]["status"] == "input_required", report
    assert "approval" in report["first"]["statusMessage"]
    assert report["outcome"]["status"] == "completed", report
    answer = report["outcome"]["result"]["structuredContent"]
    assert (answer["status"], answer["approval"]["decision"]) == ("succeeded", "approved")


def test_a_cancelled_task_declines_its_job_which_never_starts(served: Served) -> None:
    with serving(served.home, served.env, api_only=True) as base:
        # No worker: the call's job stays queued, so the call answers a task.
        cancelled = run_js(
            served, base, step="cancel", tool="tracker__read_issue", arguments={"issue_ref": "T-1"}
        )
        assert (cancelled["kind"], cancelled["after"]) == ("task", "cancelled"), cancelled
        task_id = cancelled["taskId"]
        view = job(served, task_id)
        assert view.status.value == "declined" and view.cancelled is not None
        # A worker comes back: it drops the cancelled job's message and runs the next one.
        with worker(served, "b"):
            later = run_js(
                served,
                base,
                step="start",
                tool="tracker__read_issue",
                arguments={"issue_ref": "T-1", "_wait_s": 30},
            )
            after = later.get("taskId") or later["outcome"]["result"]["structuredContent"]["job_id"]
            wait_until(lambda: job(served, after).terminal, 60, "the next job to end")
    assert "work.started" not in event_types(served, task_id)
