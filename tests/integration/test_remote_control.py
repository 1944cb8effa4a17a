"""Celery's own tools work against our workers: two real `outcomes worker` processes on one host
(each with its unique node name, `outcomes-PID@host`) both answer `celery -A workers.main
inspect ping` and `inspect active` through a real broker, and `outcomes status` sees both."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cli.status_commands import EXIT_NOT_READY
from tests.plugins.deployments import Deployment, deployments, wait_terminal

CELERY = Path(sys.executable).parent / "celery"
OUTCOMES = Path(sys.executable).parent / "outcomes"
INSPECT_TIMEOUT_S = 30  # a ceiling only: with -d, celery returns once every node answered


def inspect(deployment: Deployment, command: str, nodes: list[str]) -> dict[str, object]:
    argv = [str(CELERY), "-A", "workers.main", "inspect", command, "--json"]
    argv += ["--timeout", str(INSPECT_TIMEOUT_S), "-d", ",".join(nodes)]
    done = subprocess.run(
        argv, cwd=deployment.home, env=deployment.env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    replies = json.loads(done.stdout)
    assert isinstance(replies, dict)
    return replies


def status(deployment: Deployment, timeout_s: float) -> dict[str, object]:
    argv = [str(OUTCOMES), "status", "--json", "--timeout", str(timeout_s)]
    done = subprocess.run(
        [*argv, "--api-url", "http://127.0.0.1:9"],
        cwd=deployment.home,
        env=deployment.env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == EXIT_NOT_READY, done.stdout + done.stderr  # no API: exit 3
    broker = json.loads(done.stdout)["broker"]
    assert isinstance(broker, dict) and broker["reachable"] is True
    assert broker["queue"] == deployment.queue
    return broker


@pytest.mark.parametrize(
    "deployment", deployments("rabbitmq/sqlite", "redis/sqlite"), indirect=True
)
def test_two_workers_on_one_host_answer_inspect_ping_and_active(deployment: Deployment) -> None:
    job = deployment.submit("tracker.read_issue", {"issue_ref": "T-1"})
    waiting = status(deployment, timeout_s=0.5)  # no worker yet: nobody can answer
    assert (waiting["workers"], waiting["queue_depth"]) == ([], 1)

    workers = deployment.start_workers(count=2, concurrency=1)
    host = socket.gethostname()
    nodes = [f"outcomes-{w.process.pid}@{host}" for w in workers]
    wait_terminal(deployment.store, [job.job_id])

    pings = inspect(deployment, "ping", nodes)
    assert pings == {node: {"ok": "pong"} for node in nodes}

    active = inspect(deployment, "active", nodes)
    assert sorted(active) == sorted(nodes)
    assert all(tasks == [] for tasks in active.values())  # idle: the one job is done

    # A ceiling for the ping's answers, not a threshold: both answer within milliseconds.
    running = status(deployment, timeout_s=10)
    assert (running["workers"], running["queue_depth"]) == (sorted(nodes), 0)
