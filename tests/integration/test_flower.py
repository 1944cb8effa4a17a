"""Flower shows our workers and jobs: two real `outcomes worker` processes (threads, the batched
runner; and, once more, one prefork worker: Celery's own request in pool processes) on RabbitMQ
with OUTCOMES_TASK_EVENTS=1, and a real Flower (`celery -A workers.main flower`). Its HTTP API
lists the workers online, and every job under its job id, with the tool's name and the Celery
state closest to the ledger's outcome (a crash is FAILURE, never SUCCESS; a decline or a brake's
refusal REVOKED), its result text saying the ledger's status. No argument value reaches Flower.
On threads workers the retried job's second attempt comes through a delayed message, which
takes Celery's own request too (workers/task_events.py: ExecuteRequest)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.plugins.deployments import Deployment, deployments, wait_terminal
from tests.serving import free_port
from workers.app import EXECUTE_TASK

CELERY = Path(sys.executable).parent / "celery"
AUTH = ("ops", f"pw-{uuid.uuid4().hex[:12]}")
READY_S = 60.0
SHOWN_S = 60.0
POLL_S = 0.2

# name -> (tool, args, Celery state, result text, exception)
JOBS: dict[str, tuple[str, dict[str, Any], str, str, str | None]] = {
    "ok": ("tracker.read_issue", {"issue_ref": "T-1"}, "SUCCESS", "succeeded", None),
    "partial": (
        "tracker.read_issue",
        {"issue_ref": "T-1", "connector": "stale"},
        "SUCCESS",
        "partial",
        None,
    ),
    "crash": ("debug.crash", {}, "FAILURE", "failed: TOOL_CRASHED", "TOOL_CRASHED"),
    "silent": (
        "debug.return_nothing",
        {},
        "FAILURE",
        "failed: OUTCOME_MISSING",
        "OUTCOME_MISSING",
    ),
    # Retried once (a delayed message, Celery's own request), then failed for good.
    "retried": (
        "tracker.read_issue",
        {"issue_ref": "T-1", "connector": "timeout"},
        "FAILURE",
        "failed: SOURCE_UNRELIABLE",
        "SOURCE_UNRELIABLE",
    ),
    "declined": (
        "social.draw_card",
        {"post_id": "p-1", "has_cover": True},
        "REVOKED",
        "declined",
        None,
    ),
    "halted": ("canary.halt", {}, "REVOKED", "refused: BRAKE_ENGAGED", None),
}


@contextmanager
def flower(dep: Deployment, port: int) -> Iterator[str]:
    """A real Flower on the deployment's broker and queue, stopped by its pid at the end."""
    log_path = dep.home / "flower.log"
    argv = [str(CELERY), "-A", "workers.main", "flower", f"--port={port}"]
    argv += ["--address=127.0.0.1", "--persistent=False", f"--basic-auth={AUTH[0]}:{AUTH[1]}"]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv,
            cwd=dep.home,
            env=dep.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(
            lambda: _answers(f"{base}/healthcheck"),
            READY_S,
            "Flower to answer",
            lambda: _exited(process, log_path),
        )
        yield base
    finally:
        if process.poll() is None:
            with suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            process.wait(timeout=15)
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # its own session: pgid == pid
        process.wait(timeout=15)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _exited(process: subprocess.Popen[bytes], log_path: Path) -> str | None:
    if process.poll() is None:
        return None
    return f"Flower exited with {process.returncode}:\n{log_path.read_text()[-3000:]}"


def wait_for(
    condition: Callable[[], bool],
    timeout_s: float,
    what: str,
    gone: Callable[[], str | None] = lambda: None,
    shown: Callable[[], object] = lambda: "",
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if (why := gone()) is not None:
            pytest.fail(why)
        if time.monotonic() > deadline:
            pytest.fail(
                f"timed out after {timeout_s:.0f}s waiting for {what}; last seen: {shown()}"
            )
        time.sleep(POLL_S)


def api(base: str, path: str) -> Any:
    answer = httpx.get(f"{base}{path}", auth=AUTH, timeout=10)
    answer.raise_for_status()
    return answer.json()


@pytest.mark.parametrize("deployment", deployments("rabbitmq/sqlite"), indirect=True)
@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_flower_shows_the_workers_online_and_each_job_under_its_id(
    deployment: Deployment, pool: str
) -> None:
    """Two threads workers (the default: the batched runner), or one prefork worker (Celery's
    own request, in pool processes)."""
    dep = deployment
    dep.env["OUTCOMES_TASK_EVENTS"] = "1"
    workers = dep.start_workers(count=2 if pool == "threads" else 1, concurrency=2, pool=pool)
    host = socket.gethostname()
    nodes = sorted(f"outcomes-{w.process.pid}@{host}" for w in workers)
    secret = f"sk-live-{uuid.uuid4().hex}"

    with flower(dep, free_port()) as base:
        # Online: their heartbeats reached Flower's event receiver (which hence listens).
        seen: dict[str, Any] = {}

        def online() -> bool:
            seen.update(api(base, "/api/workers?status=1"))
            return all(seen.get(node) is True for node in nodes)

        wait_for(online, READY_S, "the workers online in Flower", shown=lambda: seen)
        listed = api(base, "/api/workers?refresh=1")
        assert set(nodes) <= set(listed), listed

        jobs = {}
        for name, (tool, args, *_) in JOBS.items():
            if tool in {"debug.crash", "canary.halt"}:
                args = {**args, "secret": secret}  # a declared secret: never shown
            jobs[name] = dep.submit(tool, args).job_id
        views = wait_terminal(dep.store, jobs.values(), timeout_s=60)
        assert views[jobs["crash"]].code is not None
        assert views[jobs["crash"]].code.value == "TOOL_CRASHED"

        tasks: dict[str, Any] = {}

        def shown() -> bool:
            tasks.clear()
            tasks.update(api(base, "/api/tasks"))
            return all(
                jobs[name] in tasks and tasks[jobs[name]].get("state") == state
                for name, (_, _, state, _, _) in JOBS.items()
            )

        wait_for(
            shown,
            SHOWN_S,
            "every job in its state in Flower",
            shown=lambda: {n: tasks.get(j, {}).get("state") for n, j in jobs.items()},
        )
        for name, (tool, _, state, result, exception) in JOBS.items():
            task = tasks[jobs[name]]
            assert task["uuid"] == jobs[name]  # the job id is the task id
            assert (task["name"], task["state"], task["result"]) == (EXECUTE_TASK, state, result)
            assert task["kwargs"] == repr({"tool": tool}), task  # the tool's name, no argument
            assert task["args"] == repr([jobs[name]]), task
            assert task["worker"] in nodes, task
            if exception is not None:
                assert task["exception"] == exception, task
        # Both ways sent events: the batched runner's, and Celery's own request's for the
        # retry's delayed message (the first attempt was RETRY, the second FAILURE).
        assert tasks[jobs["retried"]]["retried"] is not None
        assert views[jobs["retried"]].attempts == 2
        assert secret not in str(tasks) and secret not in str(api(base, "/api/workers"))
