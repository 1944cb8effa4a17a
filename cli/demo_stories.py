"""The demo's two stories that need the worker itself to change: a worker killed in the middle
of a paid job (the reconciler records OUTCOME_MISSING / worker_lost), and a job queued while no
worker runs, then held by a brake pulled before a worker reaches it (halted at execution).

Both are real: the worker process is killed by its pid (SIGKILL to its process group), the
reconciler's pass is the one `outcomes reconcile` runs, and the halt is the worker's own
re-check of the brake when it claims the job."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import click

from cli.processes import start_worker
from ledger.dispatch import Dispatcher
from ledger.runtime.ledger import Ledger
from ledger.services import brakes
from ledger.services.reconcile import ReconcileRunner, policy_from
from ledger.settings import load_settings

STORY_TIMEOUT_S = 90.0
LOST = "worker killed mid-job (reconciler)"
HALTED = "queued, then brake pulled (worker halts)"


class Api(Protocol):
    def call(self, method: str, path: str, token: str, body: Any = None) -> tuple[int, Any]: ...


@dataclass
class Stage:
    """What the stories share with the demo: its API client, agent token, ledger and worker."""

    api: Api
    token: str
    ledger: Ledger
    dispatcher: Dispatcher
    worker: subprocess.Popen[bytes]
    log: Path
    pulled: list[str]

    def submit(self, tool: str, args: dict[str, Any]) -> tuple[int, str]:
        status, body = self.api.call("POST", "/v1/jobs", self.token, {"tool": tool, "args": args})
        if "job_id" not in body:
            raise click.ClickException(f"{tool}: HTTP {status} without a job id: {body}")
        return status, str(body["job_id"])

    def watch(self, job_id: str, until: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """Long-poll the job until `until(envelope)` holds (each poll returns on a change)."""
        deadline = time.monotonic() + STORY_TIMEOUT_S
        while True:
            _, envelope = self.api.call("GET", f"/v1/jobs/{job_id}?wait=1", self.token)
            if until(envelope):
                return dict(envelope)
            if time.monotonic() > deadline:
                raise click.ClickException(f"job {job_id} stuck at {envelope.get('status')}")


def worker_lost(stage: Stage) -> tuple[str, int, str, dict[str, Any]]:
    """Kill the worker while the paid job runs; reconcile until the lapsed lease is recorded."""
    http, job_id = stage.submit("debug.spend_slowly", {"seconds": 60})
    stage.watch(job_id, lambda e: e.get("status") == "running")
    os.killpg(stage.worker.pid, signal.SIGKILL)  # the worker leads its own session
    stage.worker.wait()
    runner = ReconcileRunner(stage.ledger, stage.dispatcher, policy_from(load_settings()))

    def reconciled(envelope: dict[str, Any]) -> bool:
        if envelope.get("terminal"):
            return True
        runner.run_once()  # records nothing until the killed worker's lease has lapsed
        return False

    return LOST, http, job_id, stage.watch(job_id, reconciled)


def halted_at_execution(stage: Stage) -> tuple[str, int, str, dict[str, Any]]:
    """With no worker running, a job is accepted and queued; then the brake is pulled; then a
    worker starts, takes the queued job, re-checks the brake and halts it."""
    assert stage.worker.poll() is not None, "the previous story stopped the worker"
    http, job_id = stage.submit("social.draw_card", {"post_id": "p-7"})
    view = brakes.pull(stage.ledger, "tool:social.draw_card", "demo: pulled after submit", "demo")
    stage.pulled.append(view.brake_id)
    stage.worker = start_worker(log=stage.log)
    return HALTED, http, job_id, stage.watch(job_id, lambda e: bool(e.get("terminal")))
