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

from tests.plugins.deployments import Deployment, deployments

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


@pytest.mark.parametrize("deployment", deployments("rabbitmq/sqlite"), indirect=True)
def test_two_workers_on_one_host_answer_inspect_ping_and_active(deployment: Deployment) -> None:
    workers = deployment.start_workers(count=2, concurrency=1)
    host = socket.gethostname()
    nodes = [f"outcomes-{w.process.pid}@{host}" for w in workers]

    pings = inspect(deployment, "ping", nodes)
    assert pings == {node: {"ok": "pong"} for node in nodes}

    active = inspect(deployment, "active", nodes)
    assert sorted(active) == sorted(nodes)
    assert all(tasks == [] for tasks in active.values())  # idle: nothing submitted

    status = subprocess.run(
        [str(OUTCOMES), "status", "--json", "--timeout", "10", "--api-url", "http://127.0.0.1:9"],
        cwd=deployment.home,
        env=deployment.env,
        capture_output=True,
        text=True,
        check=True,
    )
    broker = json.loads(status.stdout)["broker"]
    assert broker["reachable"] is True and broker["workers"] == sorted(nodes)
    assert broker["queue"] == deployment.queue and broker["queue_depth"] == 0
